"""``evaluator-host review …`` against a real service, as a user runs it: a queue on a job created with a
selection, listed, its items shown, a verdict given, both exports, the evaluator's agreement, verdicts turned
into fixtures; a mistake or an error answer is one line and exit status 2."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.service import serving
from tests.support.wait import wait_until

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': inputs['s'], 'passed': inputs['s'] >= 0.5}\n"


def cli(server: str, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "evaluator_host.cli", "review", *argv, "--server", server]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_review_commands_through_a_running_service(tmp_path: Path) -> None:
    with serving(tmp_path, "process") as (client, _proc):
        server = str(client.base_url)
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()["id"]
        rows = [{"s": s / 4, "outputs": "x"} for s in range(5)]
        job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows}).json()["id"]
        wait_until(lambda: client.get(f"/v1/jobs/{job}").json()["status"] == "succeeded", 120, 0.1)

        made = cli(server, "create", "low scores", "--job", job, "--score-below", "0.5", "--json")
        assert made.returncode == 0, made.stderr
        queue = json.loads(made.stdout)
        assert (queue["items"], queue["select"]) == (2, {"score_below": 0.5})
        assert queue["id"] in cli(server, "list").stdout
        items = [json.loads(line) for line in cli(server, "items", queue["id"], "--json").stdout.splitlines()]
        assert [i["source"]["index"] for i in items] == [0, 1] and items[0]["inputs"] == rows[0]
        given = cli(
            server, "verdict", queue["id"], items[1]["id"], "--pass", "--score", "0.9", "--note", "ok", "--json"
        )
        assert given.returncode == 0 and json.loads(given.stdout)["passed"] is True, given.stderr
        assert "reviewed" in cli(server, "items", queue["id"], "--state", "reviewed").stdout

        lines = cli(server, "export", queue["id"]).stdout.splitlines()
        assert [(r := json.loads(line))["human_passed"] for line in lines] == [True] and r["passed"] is False
        table = list(csv.DictReader(io.StringIO(cli(server, "export", queue["id"], "--format", "csv").stdout)))
        assert table[0]["note"] == "ok"
        agreement = json.loads(cli(server, "agreement", ev, "--json").stdout)
        assert (agreement["reviewed"], agreement["accuracy"], agreement["confusion"]["fn"]) == (1, 0.0, 1)
        assert "spearman_reason: 1 item(s)" in cli(server, "agreement", ev).stdout  # a null figure says why
        fixtures = json.loads(cli(server, "fixtures", queue["id"], "--json").stdout)
        assert (fixtures["revision"], fixtures["added"], len(fixtures["disagreeing"])) == (2, 1, 1)

        assert cli(server, "create", "x", "--job", job, "--failed", "--score-below", "1").returncode == 2
        assert cli(server, "verdict", queue["id"], items[0]["id"]).returncode == 2  # neither --pass nor --fail
        missing = cli(server, "items", "rq_nope")
        assert missing.returncode == 2 and "404" in missing.stderr
