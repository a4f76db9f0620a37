#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io when missing (Debian/Ubuntu, as
# root) and start dockerd in the background when it is not running. Used by .ci/run;
# on a workstation with Docker Desktop or a system service this does nothing.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "install Docker, then retry" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  log=${DOCKERD_LOG:-/var/log/evaluator-host-dockerd.log}
  # dockerd outlives this script: it must not inherit the caller's descriptors (e.g. a
  # `flock FILE cmd` lock, which it would then hold for as long as it runs)
  (
    for fd in /proc/$BASHPID/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    # nor the caller's TMPDIR: a test run's throwaway folder, gone when it ends (runc writes each exec's spec into
    # TMPDIR; an engine restarted by a test kept a removed one, and every later `docker exec` failed)
    exec env -u TMPDIR setsid nohup dockerd >"$log" 2>&1 </dev/null
  ) &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
docker info >/dev/null 2>&1 || { echo "dockerd did not start; see ${log:-its log}" >&2; exit 1; }
echo "Docker engine $(docker version --format '{{.Server.Version}}') is running"
