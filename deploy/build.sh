#!/usr/bin/env bash
# Build the images of deploy/compose.yaml with no registry (`make image` runs this):
#
#   deploy/build.sh [WHEEL]     (default: the newest dist/evaluator_host-*.whl; `make dist` builds it)
#
# 1. The base: $BASE (default evaluator-host/base-python:latest) must exist — `evaluator-host images build
#    --base` makes it from Debian packages (debootstrap + docker import).
# 2. The wheelhouse dist/wheelhouse: the wheel and its dependencies at requirements.lock's versions, downloaded
#    by the base image's own pip (so environment markers are those of the image's Python, not this host's) with
#    this host's CA bundle (PIP_CERT / SSL_CERT_FILE) and index (PIP_INDEX_URL) passed in. The Dockerfile then
#    installs offline from it.
# 3. The service image ($TAG, default evaluator-host/service:latest) and compose's PostgreSQL, Redis and HAProxy
#    images (evaluator-host/postgres:15, evaluator-host/redis:7, evaluator-host/haproxy:latest), built FROM the
#    same base with Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-evaluator-host/base-python:latest}
TAG=${TAG:-evaluator-host/service:latest}
wheel=${1:-$(ls -t dist/evaluator_host-*.whl 2>/dev/null | head -1)}
[ -n "$wheel" ] && [ -f "$wheel" ] || { echo "no wheel: run make dist (or pass one)" >&2; exit 1; }
docker image inspect "$BASE" >/dev/null 2>&1 \
  || { echo "no base image $BASE: run evaluator-host images build --base (make images)" >&2; exit 1; }

house=dist/wheelhouse
rm -rf "$house"
mkdir -p "$house"
cp "$wheel" "$house/"
# the lock's pins as constraints (hashes and markers dropped; a pin of a package not needed is ignored)
sed -n 's/^\([A-Za-z0-9][^ ]*==[^ ]*\).*/\1/p' requirements.lock | sed 's/\[[^]]*\]//' >"$house/constraints.txt"
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
args=(--rm --user "$(id -u):$(id -g)" -e HOME=/tmp -v "$PWD/$house:/wheelhouse")
[ -f "$ca" ] && args+=(-v "$ca:/etc/evaluator-host-ca.crt:ro" -e PIP_CERT=/etc/evaluator-host-ca.crt)
[ -n "${PIP_INDEX_URL:-}" ] && args+=(-e "PIP_INDEX_URL=$PIP_INDEX_URL")
docker run "${args[@]}" "$BASE" python3 -m pip download --quiet --disable-pip-version-check \
  --only-binary=:all: -d /wheelhouse -c /wheelhouse/constraints.txt "/wheelhouse/$(basename "$wheel")"

docker build --quiet -f deploy/Dockerfile --build-arg "BASE=$BASE" -t "$TAG" . >/dev/null
docker build --quiet -f deploy/postgres.Dockerfile --build-arg "BASE=$BASE" -t evaluator-host/postgres:15 . >/dev/null
docker build --quiet -f deploy/redis.Dockerfile --build-arg "BASE=$BASE" -t evaluator-host/redis:7 . >/dev/null
docker build --quiet -f deploy/haproxy.Dockerfile --build-arg "BASE=$BASE" -t evaluator-host/haproxy:latest . >/dev/null
echo "built $TAG ($(basename "$wheel")), evaluator-host/postgres:15, evaluator-host/redis:7, evaluator-host/haproxy:latest from $BASE"
