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

from tests.support import REPO, zygote
from tests.support.service import serving
from tests.support.wait import wait_until

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': inputs['s'], 'passed': inputs['s'] >= 0.5}\n"


def cli(server: str, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "evaluator_host.cli", "review", *argv, "--server", server]
    return zygote.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


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


@pytest.mark.slow
def test_the_items_table_shows_what_was_judged_as_plain_text_and_history_lists_a_replaced_verdict(
    tmp_path: Path,
) -> None:
    """A reviewer on the command line reads the row and the outputs judged (not only ids), exactly as stored —
    rich markup or an emoji code in model output is text, never styling or an error — and sees a replaced
    verdict's history (``review history``)."""
    with serving(tmp_path, "process") as (client, _proc):
        server = str(client.base_url)
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()["id"]
        rows = [{"s": 0.0, "outputs": "[/b] closing tag :ok: and [red]ten[/red]"}, {"s": 1.0, "outputs": "x"}]
        job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows}).json()["id"]
        wait_until(lambda: client.get(f"/v1/jobs/{job}").json()["status"] == "succeeded", 120, 0.1)
        queue = json.loads(cli(server, "create", "misses", "--job", job, "--failed", "--json").stdout)

        table = cli(server, "items", queue["id"])
        assert table.returncode == 0, table.stderr
        assert f"{job} #0" in table.stdout and "[/b] closing tag :ok: and [red]ten[/red]" in table.stdout

        item = json.loads(cli(server, "items", queue["id"], "--json").stdout)["id"]
        assert cli(server, "verdict", queue["id"], item, "--pass", "--note", "first").returncode == 0
        assert cli(server, "verdict", queue["id"], item, "--fail", "--note", "second").returncode == 0
        history = [json.loads(line) for line in cli(server, "history", queue["id"], item, "--json").stdout.splitlines()]
        assert [(v["note"], v["passed"], v["current"]) for v in history] == [
            ("second", False, True),
            ("first", True, False),
        ]
        shown = cli(server, "history", queue["id"], item)
        assert shown.returncode == 0 and "second" in shown.stdout and "first" in shown.stdout, shown.stderr
        assert cli(server, "history", queue["id"]).returncode == 2  # the item id is missing: a usage line
