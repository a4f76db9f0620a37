#!/usr/bin/env bash
# Build the Python base image for the Docker backend.
#
#   sandbox_images/build_base.sh [TAG]
#
# With BASE_IMAGE set (e.g. BASE_IMAGE=python:3.12-slim, where a registry is reachable)
# the image is pulled and tagged. Otherwise — no registry, as on our CI — the root file
# system is bootstrapped from Debian packages (debootstrap --variant=minbase, plus
# python3 and ca-certificates) and imported with `docker import`. The result is labelled
# with a content key (suite + package list + this script's hash) and reused when an image
# with that key exists, so repeated calls cost nothing.
set -euo pipefail

TAG=${1:-evaluator-host/base-python:latest}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-pip,ca-certificates,tini
here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${BASE_IMAGE:-}" ]; then
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || docker pull "$BASE_IMAGE"
  docker tag "$BASE_IMAGE" "$TAG"
  echo "$TAG <- $BASE_IMAGE"
  exit 0
fi

key=$(printf '%s|%s|%s' "$SUITE" "$PACKAGES" "$(sha256sum "$here/build_base.sh" | cut -c1-16)" | sha256sum | cut -c1-16)
# Runtime images are built FROM the base and inherit its labels: skip anything with a runtime id.
existing=""
for id in $(docker images -q --filter "label=evaluator-host.base-key=$key"); do
  if [ -z "$(docker image inspect -f '{{index .Config.Labels "evaluator-host.runtime-id"}}' "$id")" ]; then
    existing=$id
    break
  fi
done
if [ -n "$existing" ]; then
  docker tag "$existing" "$TAG"
  echo "$TAG is up to date (key $key)"
  exit 0
fi

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
  --change "LABEL evaluator-host.base-key=$key" \
  --change "LABEL evaluator-host.base-suite=$SUITE" \
  - "$TAG" >/dev/null
echo "$TAG built from Debian $SUITE (key $key)"
