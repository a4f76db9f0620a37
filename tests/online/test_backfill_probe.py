"""A fast rule's first backfill page (issue 50, ``online/backfill/direct.py``'s probe): a rule never measured has
its page's first target scored by the planner; when that run was fast, the page's other targets are scored by
the planner too, not queued for the scorer (each target once, every one ``done``); when it was slow, they are
queued for the scorer as before. Which path scored a row is read from the service's ``/metrics``: the scorer
observes a scoring lag for each row it stores, the planner none (a backfill's score is no measure of it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from evaluator_host.store.db import make_engine
from tests.support.online import chat_trace, score_rows
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {"EVALUATOR_HOST_ONLINE_POLL_S": "0.05", "EVALUATOR_HOST_ONLINE_BACKFILL_MAX_TARGETS": "1000"}
FAST = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
SLOW = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.02)\n    return 1.0\n"  # over 5 ms


def _lag_count(client: httpx.Client) -> float:
    """How many stored scores the scorer observed a lag for (``..._scoring_lag_seconds_count``)."""
    found = re.search(r"^evaluator_host_online_scoring_lag_seconds_count (\S+)$", client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def _backfilled(client: httpx.Client, code: str) -> tuple[str, dict[str, Any]]:
    ev = client.post("/v1/evaluators", json={"name": "probe", "language": "python", "code": code}).json()["id"]
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
    started = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()

    def ended() -> dict[str, Any] | None:
        got: dict[str, Any] = client.get(f"/v1/online-rules/{rule_id}/backfills/{started['id']}").json()
        return got if got["status"] != "running" else None

    return rule_id, wait_until(ended, 300, 0.1, what="the backfill ended")


@pytest.mark.slow
@pytest.mark.parametrize(("code", "queued"), [(FAST, False), (SLOW, True)], ids=["fast", "slow"])
def test_a_new_rules_first_page_is_scored_by_the_planner_once_its_first_target_ran_fast_else_queued(
    tmp_path: Path, code: str, queued: bool
) -> None:
    with serving(tmp_path, "process", env=ENV) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        traces = [chat_trace(engine, state="routed") for _ in range(40)]
        before = _lag_count(client)
        rule_id, done = _backfilled(client, code)
        assert (done["status"], done["total"], done["done"], done["skipped"]) == ("done", 40, 40, 0)
        rows = [r for r in score_rows(engine) if r.rule_id == rule_id]
        assert sorted(r.target_id for r in rows) == sorted(traces)  # each target once
        assert {(r.state, r.status, r.score) for r in rows} == {("done", "ok", 1.0)}
        if queued:  # the scorer counts its stored rows once their transaction is back: the rows may read done first
            wait_until(lambda: _lag_count(client) - before >= 39, 30, what="the scorer's lag observations")
        by_scorer = _lag_count(client) - before
        assert by_scorer == (39 if queued else 0)  # slow: all but the probe's first queued; fast: none
        assert client.get("/healthz").status_code == 200
        engine.dispose()
