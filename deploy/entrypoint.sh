#!/bin/sh
# The image's entry point: `evaluator-host "$@"`.
#
# EVALUATOR_HOST_SHARED_DIR (the docker backend through the host's engine socket): a host directory mounted at
# the SAME path inside the container. The host's engine resolves the paths of the service's bind mounts (the
# harnesses, the vendored packages, build and socket folders) on the host, so everything the service binds
# must live there: the venv is copied in once per version (its own python then finds the harnesses there),
# TMPDIR points there, and so does the data dir ($EVALUATOR_HOST_SHARED_DIR/data). docs/deploy.md, "Docker backend".
set -eu
if [ -n "${EVALUATOR_HOST_SHARED_DIR:-}" ]; then
  shared=$EVALUATOR_HOST_SHARED_DIR
  version=$(/opt/evaluator-host/bin/python -c 'import evaluator_host; print(evaluator_host.__version__)')
  venv=$shared/venv-$version
  if [ ! -x "$venv/bin/python" ]; then
    rm -rf "$venv.partial"
    cp -a /opt/evaluator-host "$venv.partial"
    mv "$venv.partial" "$venv"
  fi
  mkdir -p "$shared/tmp" "$shared/data"
  export TMPDIR="$shared/tmp"
  export EVALUATOR_HOST_DATA_DIR="$shared/data"
  exec "$venv/bin/python" -m evaluator_host.cli "$@"
fi
exec /opt/evaluator-host/bin/evaluator-host "$@"
