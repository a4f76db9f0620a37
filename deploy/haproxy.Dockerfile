# HAProxy for deploy/compose.yaml's replicas (deploy/haproxy.cfg), from Debian's package on the locally
# imported base (no registry), as deploy/postgres.Dockerfile and deploy/redis.Dockerfile are built.
ARG BASE=evaluator-host/base-python:latest
FROM ${BASE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
COPY deploy/haproxy.cfg /etc/haproxy/haproxy.cfg
RUN /usr/sbin/haproxy -c -f /etc/haproxy/haproxy.cfg
USER haproxy
EXPOSE 8000 4317 8404
CMD ["/usr/sbin/haproxy", "-db", "-W", "-f", "/etc/haproxy/haproxy.cfg"]
