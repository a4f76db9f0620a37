# PostgreSQL 15 for deploy/compose.yaml, from Debian's packages on the locally imported base (no registry).
# The POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB environment of the familiar image: the first start of an
# empty data volume creates the cluster (scram-sha-256 for network clients), that user and that database.
ARG BASE=evaluator-host/base-python:latest
FROM ${BASE}
# no service started while installing, and no default cluster (the entry point makes its own in the volume)
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
 && mkdir -p /etc/postgresql-common/createcluster.d \
 && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/no-main-cluster.conf \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY deploy/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["sh", "/usr/local/bin/postgres-entrypoint"]
