"""``evaluator-host rules …`` against a real service, as a user runs them: create, list, show,
pause, resume, scores, stats, delete; an error answer is one line and exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from evaluator_host.store.db import make_engine
from tests.support import REPO, zygote
from tests.support.online import chat_trace, hex_id, put_trace, span
from tests.support.service import serving
from tests.support.wait import wait_until

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.75, 'label': 'fine'}\n"


def cli(server: str, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "evaluator_host.cli", "rules", *argv, "--server", server]
    return zygote.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def wait_scored(client: httpx.Client, rule_id: str, done: int | None = None) -> str:
    """Until the rule's scores have one in state done (``done`` None) or exactly ``done`` of them; then what
    ``rules scores --json`` prints, checked to say as much. The waiting asks the API the CLI asks (``GET
    /v1/online-rules/{id}/scores``, its 50 newest) over HTTP: a ``rules`` run is a process of its own, about a
    second of CPU each, and it was run every 0.2 s; the CLI's own output is read once, after."""

    def states() -> list[str]:
        page = client.get(f"/v1/online-rules/{rule_id}/scores", params={"limit": 50})
        assert page.status_code == 200, page.text
        return [score["state"] for score in page.json()["data"]]

    wait_until(lambda: (n := states().count("done")) and (done is None or n == done), 60, 0.2, what="the scores")
    printed = cli(str(client.base_url), "scores", rule_id, "--json").stdout
    assert (printed.count('"state":"done"') == done) if done is not None else '"state":"done"' in printed, printed
    return printed


@pytest.mark.slow
def test_rules_commands_through_a_running_service(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_ONLINE_POLL_S": "0.05"}) as (client, _proc):
        server = str(client.base_url)
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()["id"]
        made = cli(server, "create", ev, "--name", "chats", "--service", "chat-api", "--attr", "env=prod", "--json")
        assert made.returncode == 0, made.stderr
        rule = json.loads(made.stdout)
        assert rule["filter"]["attributes"] == [{"key": "env", "equals": "prod", "exists": None}]
        assert rule["id"] in cli(server, "list").stdout
        assert json.loads(cli(server, "pause", rule["id"], "--json").stdout)["enabled"] is False
        assert json.loads(cli(server, "resume", rule["id"], "--json").stdout)["enabled"] is True
        assert "chat-api" in cli(server, "show", rule["id"]).stdout

        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        trace_id = chat_trace(engine, service="chat-api")
        engine.dispose()
        score = json.loads(wait_scored(client, rule["id"]).splitlines()[0])
        assert score["trace_id"] == trace_id and score["score"] == 0.75
        stats = cli(server, "stats", rule["id"])
        assert stats.returncode == 0 and "0.75" in stats.stdout and "fine" in stats.stdout
        assert "decisions in the range: scored 1; pending now: queued 0, running 0" in stats.stdout
        why = json.loads(cli(server, "why", trace_id, "--json").stdout)
        assert (why["rule_id"], why["decision"], why["target"]) == (rule["id"], "scored", None)
        assert why["reason"] == "score 0.75, passed None, label 'fine'"

        assert cli(server, "delete", rule["id"]).returncode == 0
        gone = cli(server, "show", rule["id"])
        assert gone.returncode == 2 and "404" in gone.stderr and "NotFound" in gone.stderr
        assert cli(server, "create", "ev_missing").returncode == 2


@pytest.mark.slow
def test_rules_create_level_span_and_rules_test_through_a_running_service(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_ONLINE_POLL_S": "0.05"}) as (client, _proc):
        server = str(client.base_url)
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()["id"]
        made = cli(server, "create", ev, "--level", "span", "--span", "llm", "--json")
        assert made.returncode == 0, made.stderr
        rule = json.loads(made.stdout)
        assert rule["target"] == {"level": "span"}

        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        trace_id = chat_trace(engine)  # a root "chat" and one "llm" span
        engine.dispose()
        (line,) = wait_scored(client, rule["id"]).splitlines()
        score = json.loads(line)
        llm_span = score["span_id"]
        assert score["trace_id"] == trace_id and score["target_id"] == f"{trace_id}/{llm_span}"

        tried = cli(server, "test", ev, "--level", "span", "--limit", "5", "--json")
        assert tried.returncode == 0, tried.stderr
        results = [json.loads(x) for x in tried.stdout.splitlines()]
        assert len(results) == 2 and {r["status"] for r in results} == {"ok"}  # both spans: no filter
        assert {r["label"] for r in results} == {"fine"} and llm_span in {r["span_id"] for r in results}
        table = cli(server, "test", ev, "--span", "llm")
        assert table.returncode == 0 and trace_id in table.stdout and "0.75" in table.stdout
        nothing = cli(server, "test", ev, "--span", "no-such-span")
        assert nothing.returncode == 1 and "nothing matched" in nothing.stderr
        assert cli(server, "scores", rule["id"], "--json").stdout.count("\n") == 1  # the trials stored nothing


@pytest.mark.slow
def test_rules_create_level_session_and_rules_test_through_a_running_service(tmp_path: Path) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': float(trace['num_traces']), 'label': 'turns'}\n"
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_ONLINE_POLL_S": "0.05"}) as (client, _proc):
        server = str(client.base_url)
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": code}).json()["id"]
        wrong = cli(server, "create", ev, "--quiet-s", "5")
        assert wrong.returncode == 2 and "--level session" in wrong.stderr
        made = cli(
            server, "create", ev, "--level", "session", "--session-key", "chat.thread", "--quiet-s", "1", "--json"
        )
        assert made.returncode == 0, made.stderr
        rule = json.loads(made.stdout)
        assert rule["target"] == {"level": "session", "session_key": "chat.thread", "quiet_s": 1}

        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        for question in ("hi", "bye"):
            trace_id = hex_id(16)
            put_trace(engine, [span(trace_id, "turn", attributes={"chat.thread": "t-1", "ag.data.inputs": question})])
        engine.dispose()
        done = [json.loads(x) for x in wait_scored(client, rule["id"]).splitlines()]
        assert {(s["session_id"], s["score"]) for s in done if s["state"] == "done" and s["current"]} <= {
            ("t-1", 1.0),
            ("t-1", 2.0),
        }

        tried = cli(server, "test", ev, "--level", "session", "--session-key", "chat.thread", "--json")
        assert tried.returncode == 0, tried.stderr
        (result,) = [json.loads(x) for x in tried.stdout.splitlines()]
        assert (result["session_id"], result["score"], result["label"]) == ("t-1", 2.0, "turns")
        nothing = cli(server, "test", ev, "--level", "session")  # the default keys: these turns name none
        assert nothing.returncode == 1 and "nothing matched: no session" in nothing.stderr


@pytest.mark.slow
def test_rules_backfill_dry_run_then_backfill_through_a_running_service(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_ONLINE_POLL_S": "0.05"}) as (client, _proc):
        server = str(client.base_url)
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        traces = [chat_trace(engine, state="routed") for _ in range(3)]  # stored before the rule
        engine.dispose()
        ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()["id"]
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        dry = cli(server, "backfill", rule, "--since", "2000-01-01T00:00:00Z", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert {k: json.loads(dry.stdout)[k] for k in ("traces", "targets", "already_scored")} == {
            "traces": 3,
            "targets": 3,
            "already_scored": 0,
        }
        started = cli(server, "backfill", rule, "--since", "2000-01-01T00:00:00Z", "--limit", "2")
        assert started.returncode == 0 and "bf_" in started.stdout, started.stderr
        scored = {json.loads(x)["trace_id"] for x in wait_scored(client, rule, done=2).splitlines()}
        assert scored < set(traces)
        assert cli(server, "backfill", rule, "--limit", "0").returncode == 2  # refused by the API (422)


@pytest.mark.slow
def test_rules_without_the_key_of_a_keyed_service_says_where_the_key_goes(tmp_path: Path) -> None:
    """A user who copies ``evaluator-host rules test …`` without a key gets the 401 and where the key is read."""
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_API_KEYS": "walk-key"}) as (client, _proc):
        server = str(client.base_url)
        command = [sys.executable, "-m", "evaluator_host.cli", "rules", "list", "--server", server]
        bare = {k: v for k, v in os.environ.items() if k != "EVALUATOR_HOST_API_KEY"}

        def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return zygote.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)

        refused = run(bare)
        assert refused.returncode == 2
        assert "answered 401" in refused.stderr
        assert "(the key: --api-key or EVALUATOR_HOST_API_KEY)" in refused.stderr
        listed = run({**bare, "EVALUATOR_HOST_API_KEY": "walk-key"})
        assert listed.returncode == 0, listed.stderr


@pytest.mark.slow
def test_rules_backfill_wait_follows_it_and_prints_its_cached_count_and_a_failed_one_exits_1(tmp_path: Path) -> None:
    """``rules backfill --wait``: progress lines with every count on stderr, the ended backfill's row (``cached``
    beside done/skipped/failed) on stdout; a re-run answered from the result cache says so; ``--backfill-id`` shows
    one; a backfill whose every target failed exits 1 with its reason."""
    env = {"EVALUATOR_HOST_ONLINE_POLL_S": "0.05", "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05"}
    with serving(tmp_path, "process", env=env) as (client, _proc):
        server = str(client.base_url)
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        for _ in range(3):
            chat_trace(engine, state="routed")
        engine.dispose()
        body = {"name": "e", "language": "python", "code": CODE, "settings": {"cache": True}}
        ev = client.post("/v1/evaluators", json=body).json()["id"]

        first = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        ran = cli(server, "backfill", first, "--wait", "--json")
        assert ran.returncode == 0, ran.stderr
        done = json.loads(ran.stdout)
        assert (done["status"], done["done"], done["skipped"], done["cached"], done["failed"]) == ("done", 3, 0, 0, 0)
        assert f"{done['id']} done: 3/3 scored · 0 skipped · 0 cached · 0 failed" in ran.stderr.splitlines()

        second = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        again = cli(server, "backfill", second, "--wait")  # the same cases: answered from the result cache
        assert again.returncode == 0, again.stderr
        header, row = (line.split() for line in again.stdout.splitlines() if "cached" in line or "bf_" in line)
        columns = [c for c in header if c.isidentifier()]
        assert columns == ["id", "status", "total", "done", "skipped", "cached", "failed", "revision"]
        cells = dict(zip(columns, [c for c in row if c not in "│┃"], strict=True))
        assert (cells["status"], cells["done"], cells["skipped"], cells["cached"]) == ("done", "3", "0", "3")
        assert again.stderr.splitlines()[-1].endswith("done: 3/3 scored · 0 skipped · 3 cached · 0 failed")

        shown = cli(server, "backfill", first, "--backfill-id", done["id"], "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["cached"] == 0, shown.stderr

        bad_code = "def evaluate(inputs, outputs, trace):\n    raise ValueError('no judge today')\n"
        bad = client.post("/v1/evaluators", json={"name": "bad", "language": "python", "code": bad_code}).json()["id"]
        broken = client.post("/v1/online-rules", json={"evaluator_id": bad}).json()["id"]
        failed = cli(server, "backfill", broken, "--wait", "--json")
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert json.loads(failed.stdout)["status"] == "failed"
        assert "ValueError: no judge today" in failed.stderr.splitlines()[-1]

        empty = cli(server, "backfill", first, "--since", "2001-01-01T00:00:00Z", "--until", "2001-01-02T00:00:00Z",
                    "--wait", "--json")  # fmt: skip
        assert empty.returncode == 1, empty.stdout + empty.stderr  # nothing in the range: no success
        assert (json.loads(empty.stdout)["status"], json.loads(empty.stdout)["total"]) == ("done", 0)
        assert "nothing was scored" in empty.stderr.splitlines()[-1]
