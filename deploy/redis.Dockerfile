# Redis 7 for deploy/compose.yaml's worker hosts (the `queue` profile), from Debian's package on the locally
# imported base (no registry). Append-only, so queued chunks survive a restart; no password: it listens only on
# compose's private network (publish no port for it).
ARG BASE=evaluator-host/base-python:latest
FROM ${BASE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
CMD ["redis-server", "--bind", "*", "-::*", "--protected-mode", "no", "--dir", "/data", \
     "--appendonly", "yes", "--appendfsync", "everysec"]
