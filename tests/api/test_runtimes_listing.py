"""``GET /v1/runtimes`` lists every package set the workspace ran on, npm's as well as pip's, and inline
definitions' as well as stored evaluators' (issue 48: it listed only the Python runtimes of stored evaluators
while ``evaluator-host runtimes list`` showed the npm ones too). Real pip and npm installs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import evaluate, make_settings

pytestmark = pytest.mark.slow  # two package builds

PY = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return float(six.PY3)\n"
TS = (
    "import leftPad from 'left-pad'\n"
    "export function evaluate(inputs: unknown, outputs: string, trace: unknown) {\n"
    "  return leftPad(outputs, 3) === ' ab' ? 1 : 0\n}\n"
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", backend="process")
    with TestClient(create_app(settings), base_url="http://localhost") as test_client:
        yield test_client


def test_inline_runs_of_both_families_are_listed(client: TestClient) -> None:
    python = evaluate(client, PY, packages={"six": "1.16.0"}, settings={"timeout_s": 60})
    node = evaluate(client, TS, language="typescript", packages={"left-pad": "1.3.0"}, outputs="ab")
    assert python["status"] == "ok" and node["status"] == "ok", (python, node)
    again = evaluate(client, TS, language="typescript", packages={"left-pad": "1.3.0"}, outputs="ab")
    assert again["score"] == 1.0  # (noted once: a second call adds nothing)
    listed = client.get("/v1/runtimes").json()
    by_id = {r["id"]: r for r in listed["data"]}
    assert set(by_id) == {python["runtime"]["id"], node["runtime"]["id"]}, listed
    assert by_id[node["runtime"]["id"]]["language"] == "node"
    assert by_id[node["runtime"]["id"]]["packages"] == {"left-pad": "1.3.0"}
    assert by_id[python["runtime"]["id"]]["language"] == "python" and listed["count"] == 2
    # no packages: nothing of the workspace's own to list
    assert evaluate(client, PY.replace("import six\n", "six = type('six', (), {'PY3': True})\n"))["status"] == "ok"
    assert client.get("/v1/runtimes").json()["count"] == 2
