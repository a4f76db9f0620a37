"""Exactly once across a SIGKILL: the real ``serve`` process is killed while traces stream in and
scores are running; the next service on the data dir scores every remaining trace, and every
(rule, trace) ends with exactly one stored score — none lost, none twice; so does every (rule, span)
of a span-level rule beside them (issue 50)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow
from tests.support.online import chat_trace, score_rows
from tests.support.service import serving
from tests.support.wait import wait_until

SLOWISH = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.05)\n    return 1.0\n"
ENV = {
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_ONLINE_SCORING_BATCH": "8",
    "EVALUATOR_HOST_ONLINE_SCORING_CONCURRENCY": "12",
}
TRACES = 150


def _states(engine: object) -> dict[str, int]:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        query = select(OnlineScoreRow.state, func.count()).group_by(OnlineScoreRow.state)
        return {state: int(n) for state, n in conn.execute(query)}


@pytest.mark.slow
def test_every_trace_is_scored_exactly_once_per_rule_across_a_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    sent: list[str] = []
    stop = threading.Event()
    with serving(data_dir, "process", env=ENV) as (client, proc):
        rules = []
        for name in ("one", "two"):
            ev = client.post("/v1/evaluators", json={"name": name, "language": "python", "code": SLOWISH}).json()
            rules.append(client.post("/v1/online-rules", json={"evaluator_id": ev["id"]}).json()["id"])
        ev = client.post("/v1/evaluators", json={"name": "spans", "language": "python", "code": SLOWISH}).json()
        per_span = client.post("/v1/online-rules", json={"evaluator_id": ev["id"], "target": {"level": "span"}})
        span_rule = per_span.json()["id"]
        engine = make_engine(f"sqlite:///{data_dir / 'evaluator-host.db'}")

        def stream() -> None:
            while len(sent) < TRACES and not stop.is_set():
                sent.append(chat_trace(engine))
                time.sleep(0.01)

        sender = threading.Thread(target=stream, daemon=True)
        sender.start()
        wait_until(
            lambda: _states(engine).get("done", 0) >= 20 and _states(engine).get("running", 0) > 0,
            120,
            0.02,
            what="scores done and running",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        at_kill = _states(engine)
        sender.join(timeout=60)  # the stream goes on while the service is down
    assert at_kill.get("running", 0) > 0 and len(sent) == TRACES

    with serving(data_dir, "process", env=ENV) as (client, _proc):
        # 2 trace-level rules, and a span-level one over the 2 spans of each trace
        wait_until(lambda: _states(engine) == {"done": 4 * TRACES}, 180, 0.1, what="every trace scored")
        rows = score_rows(engine)
        by_trace = [r for r in rows if r.rule_id != span_rule]
        assert sorted((r.rule_id, r.trace_id) for r in by_trace) == sorted((r, t) for r in rules for t in sent)
        by_span = [r for r in rows if r.rule_id == span_rule]
        assert len({r.target_id for r in by_span}) == len(by_span) == 2 * TRACES
        assert all(r.target_id == f"{r.trace_id}/{r.span_id}" for r in by_span)
        assert sorted({r.trace_id for r in by_span}) == sorted(sent)
        assert all(r.status == "ok" and r.score == 1.0 for r in rows)
        assert max(r.attempts for r in rows) >= 2  # the rows the killed service held were scored again
        page = client.get(f"/v1/online-rules/{rules[0]}/scores").json()
        assert page["count"] == TRACES and {s["state"] for s in page["data"]} == {"done"}
    engine.dispose()
