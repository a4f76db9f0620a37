"""The client tests' service: the real ``evaluator-host serve`` (process backend) with keys on (an
operator key set), a workspace made through the client, and that workspace's key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evaluator_host.client import Client
from tests.support.service import serving

ADMIN = "client-tests-operator-key"


@dataclass(frozen=True)
class Live:
    """The running service: its URL, the operator key, a workspace and that workspace's key."""

    url: str
    admin_key: str
    workspace_id: str
    key: str


@contextmanager
def live_service(data_dir: Path, backend: str = "process") -> Iterator[Live]:
    """The service on ``data_dir`` with a workspace and its key (see the module's docstring)."""
    env = {"EVALUATOR_HOST_ADMIN_KEY": ADMIN, "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2"}
    with serving(data_dir, backend=backend, env=env) as (http, _proc):
        url = str(http.base_url).rstrip("/")
        with Client(url, ADMIN) as operator:
            workspace = operator.create_workspace("client-tests")
            key = operator.create_key(workspace.id, "client-tests").key
        yield Live(url, ADMIN, workspace.id, key)
