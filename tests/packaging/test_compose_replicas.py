"""deploy/compose.yaml runs N replicas behind HAProxy (issue 54), checked without building an image (fast):
Debian's ``docker-compose`` resolves the file, the service has nothing that stops ``--scale evaluator-host=3``
(no container name, no published port, no shared data volume: each replica its own data dir), HAProxy is the
one published entry (HTTP and OTLP/gRPC) and is built from deploy/haproxy.Dockerfile as the other images are
(deploy/build.sh), and deploy/haproxy.cfg is a configuration Debian's ``haproxy -c`` accepts: round robin over
the replicas found by compose's DNS, health-checked on ``/healthz``. The stack itself runs in
tests/packaging/test_image.py (slow: it builds the images)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.support import REPO
from tests.support.haproxy import HAPROXY

COMPOSE = shutil.which("docker-compose")
DEPLOY = REPO / "deploy"


def _config() -> dict[str, Any]:
    if COMPOSE is None:
        pytest.fail("docker-compose is missing (.ci/run installs Debian's package)")
    env = {**os.environ, "EVALUATOR_HOST_API_KEYS": "k" * 32, "POSTGRES_PASSWORD": "p" * 16}
    done = subprocess.run(
        [COMPOSE, "-f", str(DEPLOY / "compose.yaml"), "config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = yaml.safe_load(done.stdout)
    return parsed


def test_the_compose_service_scales_with_no_fixed_name_port_or_shared_data_dir() -> None:
    service = _config()["services"]["evaluator-host"]
    assert "container_name" not in service and "ports" not in service, service
    assert not any(str(v).endswith("/var/lib/evaluator-host") for v in service.get("volumes", [])), service
    assert {str(p) for p in service["expose"]} == {"8000", "4317"}
    assert service["environment"]["EVALUATOR_HOST_DATABASE_URL"].startswith("postgresql://")


def test_haproxy_is_the_published_entry_built_from_debians_package_as_the_other_images() -> None:
    haproxy = _config()["services"]["haproxy"]
    # docker-compose 1.29 keeps the short form (host_ip:published:target), v2 writes the long one
    published = {
        p.removesuffix("/tcp") if isinstance(p, str) else f"{p['host_ip']}:{p['published']}:{p['target']}"
        for p in haproxy["ports"]
    }
    assert published == {"127.0.0.1:8000:8000", "127.0.0.1:4317:4317"}, haproxy["ports"]
    assert haproxy["build"]["dockerfile"].endswith("deploy/haproxy.Dockerfile")
    dockerfile = (DEPLOY / "haproxy.Dockerfile").read_text()
    assert "apt-get install" in dockerfile and "haproxy" in dockerfile and "FROM ${BASE}" in dockerfile
    assert "deploy/haproxy.Dockerfile" in (DEPLOY / "build.sh").read_text()
    assert "!deploy/haproxy.cfg" in (REPO / ".dockerignore").read_text().split()  # in the build context


def test_haproxy_cfg_is_valid_and_balances_the_replicas_round_robin_checked_on_healthz() -> None:
    if not os.path.exists(HAPROXY):
        pytest.fail("haproxy is missing (.ci/run installs Debian's package)")
    cfg = DEPLOY / "haproxy.cfg"
    checked = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = cfg.read_text()
    backend = text.split("backend replicas\n", 1)[1].split("\n\n", 1)[0]
    assert "balance roundrobin" in backend and "option httpchk GET /healthz" in backend
    assert re.search(r"server-template replica \d+ evaluator-host:8000 check resolvers compose", backend), backend
