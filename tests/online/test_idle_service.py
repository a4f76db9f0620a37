"""An idle service's background loops back off (``evaluator_host/shared/idle.py``), and nothing is late for it:
after an idle period long enough for every loop to reach ``idle_poll_max_s``, the service ran fewer database
transactions than its loops' fixed periods made it run before, a trace sent over OTLP is still scored (the
receiver wakes the assembly, which wakes the router, which wakes the scorer) and a job still runs. Counts only:
no CPU time, no duration asserted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from evaluator_host.api import create_app
from evaluator_host.shared.idle import IdleTicker
from tests.support.jobs import create_evaluator, start, wait
from tests.support.otlp_bodies import PROTOBUF, S, new_span_id, new_trace_id, protobuf_body
from tests.support.service import make_settings
from tests.support.wait import wait_until

PY = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': 'idle-ok'}\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(tmp_path_factory.mktemp("idle"), backend="process")  # the default periods and cap
    with TestClient(create_app(settings)) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        began = [0]
        event.listen(services.store.engine, "begin", lambda _conn: began.__setitem__(0, began[0] + 1))
        yield {"client": client, "services": services, "began": began}


def tickers(services: Any) -> dict[str, IdleTicker]:
    online = services.online
    return {
        "assembly": services.assembly.ticker,
        "router": online.router.ticker,
        "scorer": online.scorer.ticker,
        "backfiller": online.backfiller.ticker,
        "sink delivery": services.sink_delivery.ticker,
    }


def rest(services: Any) -> dict[str, IdleTicker]:
    """Every loop's ticker, once each waits the cap (the service has been idle long enough)."""
    every = tickers(services)
    wait_until(
        lambda: all(t.backoff.resting for t in every.values()),
        120,
        what=lambda: f"every loop at its cap: {[n for n, t in every.items() if not t.backoff.resting]} not yet",
    )
    return every


def test_an_idle_service_runs_fewer_transactions_than_its_loops_fixed_periods_did(world: dict[str, Any]) -> None:
    services, began = world["services"], world["began"]
    settings = services.settings
    every = rest(services)
    passes = {name: t.passes for name, t in every.items()}
    before, since = began[0], time.monotonic()
    # three more passes of the assembly at the cap: about three caps (6 s) of an idle service
    wait_until(lambda: every["assembly"].passes >= passes["assembly"] + 3, 120, what="three idle assembly passes")
    transactions, elapsed = began[0] - before, time.monotonic() - since
    assert all(t.passes > passes[name] for name, t in every.items()), "a loop stopped looking"
    assert all(t.backoff.resting for t in every.values())  # nothing happened: still at the cap
    # before, the assembly alone ran a transaction every online_assembly_s (and the router, scorer,
    # backfill planner and sink delivery each one or more every online_poll_s or second besides)
    assert transactions < elapsed / settings.online_assembly_s, (transactions, elapsed)


def test_a_trace_sent_to_a_service_idle_at_its_cap_is_scored_and_a_job_still_runs(world: dict[str, Any]) -> None:
    client, services = world["client"], world["services"]
    evaluator = create_evaluator(client, PY)
    made = client.post("/v1/online-rules", json={"evaluator_id": evaluator["id"], "sampling_rate": 1.0})
    assert made.status_code == 201, made.text
    rest(services)
    trace_id, now = new_trace_id(), time.time_ns()
    root = S(trace_id, new_span_id(), name="chat", start_ns=now - 2_000_000, end_ns=now)
    sent = client.post("/v1/traces", content=protobuf_body([root]), headers=PROTOBUF)
    assert sent.status_code == 200, sent.text

    def scored() -> bool:
        got = client.get(f"/v1/traces/{trace_id}").json()
        return any(s["state"] == "done" and s["label"] == "idle-ok" for s in got.get("scores", []))

    wait_until(scored, 120, 0.05, what="the score of a trace sent to an idle service")
    rest(services)
    job = wait(client, start(client, evaluator["id"], rows=[{"i": i} for i in range(3)])["id"])
    assert job["status"] == "succeeded" and job["progress"]["done"] == 3, job
