"""The TypeScript client (clients/typescript): built from the real service's OpenAPI document with the
playground's pinned typescript and esbuild, then run by Node against that service."""

from __future__ import annotations

import json
import os
import subprocess

from evaluator_host.definitions.languages import node_executable
from tests.support import REPO
from tests.support.client import Live
from tests.support.service import free_port

PACKAGE = REPO / "clients" / "typescript"


def test_the_typescript_client_is_built_from_the_openapi_document_and_runs_in_node(live: Live) -> None:
    node = str(node_executable())
    built = subprocess.run(
        [node, "build.mjs", f"{live.url}/openapi.json"], cwd=PACKAGE, capture_output=True, text=True, timeout=180
    )
    assert built.returncode == 0, built.stdout + built.stderr
    schema = (PACKAGE / "src" / "schema.ts").read_text()
    assert "export interface EvaluationResult {" in schema and "export interface Job {" in schema
    assert {p.name for p in (PACKAGE / "dist").iterdir()} >= {"index.js", "index.d.ts", "schema.d.ts"}
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "EVALUATOR_HOST_URL": live.url, "EVALUATOR_HOST_API_KEY": live.key}
    ran = subprocess.run(
        [node, "test/smoke.mjs", nowhere], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=180
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert seen == {
        "health": "ok",
        "ts": ["ok", 4],
        "byId": 1,
        "rows": 40,
        "job": ["succeeded", 40, 40],
        "results": [40, 20],
        "notFound": [404, "NotFound"],
        "syntax": [422, "SyntaxError", True],
        "noKey": 401,
        "unreachable": True,
        "fixtures": [[0, 1], 1, 0],  # compare: both rows flip; the new revision's fixture passes
    }
