#!/usr/bin/env bash
# The base image for the Docker backend, from a checkout: the same as `evaluator-host images build --base`
# (the recipe is package data, evaluator_host/sandbox/docker/build_base.sh, so an installed wheel builds it
# too). Arguments: [TAG]; BASE_IMAGE=IMAGE starts from a registry's image instead of Debian.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" -m evaluator_host.cli images build --base ${1:+--tag "$1"} ${BASE_IMAGE:+--from-image "$BASE_IMAGE"}
