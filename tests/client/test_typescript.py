"""The TypeScript client (clients/typescript): built from the real service's OpenAPI document with the
playground's pinned typescript and esbuild, then run by Node against that service: its smoke test
(test/smoke.mjs) and its online methods (test/online.mjs: try a rule, backfill, sessions, decisions)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from evaluator_host.definitions.languages import node_executable
from tests.support import REPO
from tests.support.client import Live

PACKAGE = REPO / "clients" / "typescript"


@pytest.fixture(scope="module")
def built(live: Live) -> str:
    """The client built from the live service's OpenAPI document; the Node that runs it."""
    node = str(node_executable())
    built = subprocess.run(
        [node, "build.mjs", f"{live.url}/openapi.json"], cwd=PACKAGE, capture_output=True, text=True, timeout=180
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return node


def _run(node: str, live: Live, script: str, *args: str) -> Any:
    env = {**os.environ, "EVALUATOR_HOST_URL": live.url, "EVALUATOR_HOST_API_KEY": live.key}
    ran = subprocess.run([node, script, *args], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.splitlines()[-1])


def test_the_typescript_client_is_built_from_the_openapi_document_and_runs_in_node(built: str, live: Live) -> None:
    schema = (PACKAGE / "src" / "schema.ts").read_text()
    assert "export interface EvaluationResult {" in schema and "export interface Job {" in schema
    assert {p.name for p in (PACKAGE / "dist").iterdir()} >= {"index.js", "index.d.ts", "schema.d.ts"}
    nowhere = "http://127.0.0.1:1"  # nothing listens there, ever (a free port could be the other worker's next)
    seen = _run(built, live, "test/smoke.mjs", nowhere)
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


def test_the_typescript_client_tries_a_rule_backfills_it_and_reads_sessions_and_decisions(
    built: str, live: Live
) -> None:
    schema = (PACKAGE / "src" / "schema.ts").read_text()
    for shape in ("RuleTarget", "RuleLimits", "Sink", "RuleTestAnswer", "BackfillDryRun", "Backfill", "SessionDetail"):
        assert f"export interface {shape} {{" in schema, shape
    backfill = schema[schema.index("export interface Backfill {") :]
    backfill = backfill[: backfill.index("\n}\n")]
    for field in ("cached: number;", "failed: number;", "skipped: number;"):
        assert f"\n  {field}" in backfill, field  # required: every answer has them
    seen = _run(built, live, "test/online.mjs")
    assert seen == {
        "sessionTarget": {"level": "session", "quiet_s": 1},
        "tried": [2, [["error", True, None], ["ok", True, "hello"]]],  # each llm span, scored, nothing stored
        "none": [0, 0, True],  # nothing matched: said so, not an empty success
        "refused": 422,  # quiet_s belongs to the session level
        "rule": ["trace", 600, []],
        "dry": [2, 0, True, True],
        "backfill": [2, "done", 2, 1, "done"],  # one of the two raised: counted, not fatal
        "again": "done",
        "cancelled": "cancelled",
        "cached": [["done", 2, 0, 0, 0], ["done", 2, 0, 2, 2]],  # ran, then answered from the result cache
        "session": [2, ["hi", "HI", "bye", "BYE"], "ts-conv/1", True],
        "listed": True,
        "decision": True,
    }
