"""Online scoring's bounds, each proven on a real service that stays healthy after: the backlog bound
drops (counted in /healthz, /metrics and the rule's stats) and never blocks routing; a row is
attempted at most ``online_max_attempts`` times, then stored as a ``sandbox_error`` result."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import insert

from evaluator_host.api import create_app
from evaluator_host.store.online.rows import OnlineScoreRow
from tests.support.online import chat_trace, score_rows
from tests.support.service import make_settings
from tests.support.wait import wait_until

SLEEPY = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.3)\n    return 1.0\n"
QUICK = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


def test_a_full_backlog_drops_counts_and_the_rest_is_scored(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, backend="process", online_poll_s=0.05, online_backlog_max=2, online_scoring_concurrency=1
    )
    with TestClient(create_app(settings)) as client:
        ev = client.post("/v1/evaluators", json={"name": "s", "language": "python", "code": SLEEPY}).json()
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev["id"], "enabled": False}).json()
        engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
        client.patch(f"/v1/online-rules/{rule['id']}", json={"enabled": True})
        for _ in range(6):  # one routing batch of 6 traces against a bound of 2
            chat_trace(engine, state="open")
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE online_traces SET state = 'ready'")
        wait_until(lambda: len(score_rows(engine)) == 6, 30, 0.05, what="six rows")
        wait_until(lambda: sorted(r.state for r in score_rows(engine)) == ["done"] * 2 + ["dropped"] * 4, 60, 0.1)
        # the router counts the drops once its next database call is back, after the rows read dropped: wait
        health = wait_until(lambda: (h := client.get("/healthz").json())["online"]["dropped"] == 4 and h, 30)
        assert health["status"] == "ok" and health["online"]["dropped"] == 4
        counted = f'evaluator_host_online_dropped_total{{rule="{rule["id"]}"}} 4.0'
        wait_until(lambda: counted in client.get("/metrics").text, 30, what=counted)
        assert client.get(f"/v1/online-rules/{rule['id']}/stats").json()["dropped"] == 4
        chat_trace(engine)  # the backlog drained: the next trace is scored
        wait_until(lambda: [r.state for r in score_rows(engine)].count("done") == 3, 60, 0.1)


def test_a_row_whose_scoring_stopped_its_service_each_time_is_given_up(tmp_path: Path) -> None:
    """A row left ``running`` by services that died scoring it is claimed again one attempt more each
    time; past ``online_max_attempts`` it is stored as a ``sandbox_error`` result, not run again."""
    settings = make_settings(tmp_path, backend="process", online_poll_s=0.05, online_max_attempts=2)
    with TestClient(create_app(settings)) as client:
        ev = client.post("/v1/evaluators", json={"name": "q", "language": "python", "code": QUICK}).json()
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev["id"], "enabled": False}).json()
        engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
        trace_id = chat_trace(engine, state="routed")
        with engine.begin() as conn:  # what two services killed while scoring it left
            conn.execute(
                insert(OnlineScoreRow),
                [
                    {
                        "rule_id": rule["id"],
                        "trace_id": trace_id,
                        "workspace_id": "ws_default",
                        "state": "running",
                        "claimed_by": "dead-service",
                        "claimed_until": datetime(2000, 1, 1, tzinfo=UTC),
                        "attempts": 2,
                        "enqueued_at": datetime.now(UTC),
                        "evaluator_id": ev["id"],
                    }
                ],
            )
        wait_until(lambda: [r.state for r in score_rows(engine)] == ["done"], 60, 0.05, what="the give-up result")
        (score,) = client.get(f"/v1/traces/{trace_id}").json()["scores"]
        assert score["status"] == "sandbox_error" and score["attempts"] == 3, score["result"]["error"]
        assert "gave up after 2 attempts" in score["result"]["error"]["message"]
        assert client.get("/healthz").json()["status"] == "ok"
