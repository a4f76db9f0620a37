"""An ``Idempotency-Key`` outlives the replica that died holding it (issue 54): two real ``serve`` replicas on one
PostgreSQL behind Debian's HAProxy. A ``POST /v1/evaluators`` with a key (its fixture sleeps, so the request is
in flight for seconds) is SIGKILLed with its replica mid-request; the client's retries through HAProxy with the
same key are answered 409 while the dead request's claim could still be live, then — once the claim went
unrenewed for ``EVALUATOR_HOST_IDEMPOTENCY_CLAIM_S`` — the survivor runs the request (201), and further retries
replay that answer; one evaluator exists. Before, the key stayed claimed for 24 h (409 to every retry).

And the other side of the lease: a live request that runs for several times the claim time keeps its key (its
service renews the claim): a retry through the other replica is 409 until the first answers, then replays it.
"""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.support.backends import postgres_only
from tests.support.haproxy import HAPROXY, HAProxy
from tests.support.pg import Cluster
from tests.support.replicas import Replicas
from tests.support.wait import wait_until

CLAIM_S = 2.0
SLEEPER = (
    "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(inputs.get('wait', 0))\n    return 1.0\n"
)

pytestmark = [postgres_only, pytest.mark.slow]


def _body(name: str, wait: float) -> dict[str, Any]:
    """An evaluator whose one fixture sleeps ``wait`` s: its save is in flight that long."""
    fixture = {"name": "slow", "inputs": {"wait": wait}, "expect": {"score": 1.0}}
    return {"name": name, "language": "python", "code": SLEEPER, "settings": {"timeout_s": 60}, "fixtures": [fixture]}


@pytest.fixture
def group(tmp_path: Path, postgres: Cluster) -> Iterator[Replicas]:
    env = {"EVALUATOR_HOST_IDEMPOTENCY_CLAIM_S": str(CLAIM_S)}
    replicas = Replicas(tmp_path / "replicas", postgres.database(driver="postgresql"), "process", env,
                        shared_datasets=False)  # fmt: skip
    try:
        replicas.start_all("r0", "r1")
        yield replicas
    finally:
        replicas.close()


def _claim(group: Replicas, key: str) -> tuple[datetime, str | None] | None:
    """The key's row in the database: (created_at, answer), or None before it is claimed."""
    assert group.engine is not None
    with group.engine.connect() as conn:
        row = conn.execute(text("SELECT created_at, answer FROM idempotency_keys WHERE key = :k"), {"k": key}).first()
    return None if row is None else (row[0], row[1])


def _in_background(call: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except httpx.TransportError as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_key_whose_replica_was_sigkilled_mid_request_is_served_by_another_once_its_claim_runs_out(
    group: Replicas, tmp_path: Path
) -> None:
    if not Path(HAPROXY).exists():
        pytest.fail("haproxy is not installed (.ci/run installs Debian's package)")
    proxy = HAProxy(tmp_path, {r.name: int(r.client.base_url.port or 0) for r in group.running})
    key, name = f"save-{uuid.uuid4().hex}", f"slow-{uuid.uuid4().hex[:8]}"
    headers = {"Idempotency-Key": key}
    try:
        with proxy.client() as client:
            thread, first = _in_background(lambda: client.post("/v1/evaluators", json=_body(name, 4), headers=headers))
            wait_until(lambda: _claim(group, key) is not None, 60, 0.02, what="the key to be claimed")
            busy = wait_until(
                lambda: [n for n, row in proxy.stats().items() if int(row["scur"] or 0) > 0],
                30,
                0.02,
                what="HAProxy to show the replica serving the request",
            )
            victim = next(r for r in group.running if r.name == busy[0])
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(timeout=30)
            thread.join(timeout=60)
            answer = first[0]
            assert isinstance(answer, httpx.TransportError) or answer.status_code in (502, 503, 504), answer
            claim = _claim(group, key)
            assert claim is not None and claim[1] is None, "the request answered before its replica died"

            refused: list[int] = []

            def retried() -> httpx.Response | None:
                again = client.post("/v1/evaluators", json=_body(name, 4), headers=headers)
                if again.status_code == 201:
                    return again
                assert again.status_code in (409, 502, 503), again.text  # 409: the claim may still be live
                refused.append(again.status_code)
                return None

            served = wait_until(retried, 120, 0.25, what="a retry to be served once the dead request's claim ran out")
            survivor = next(r for r in group.running if r is not victim)
            assert served.headers["x-replica"] == survivor.name
            assert served.json()["fixture_report"]["passed"] == 1
            replay = client.post("/v1/evaluators", json=_body(name, 4), headers=headers)
            assert replay.status_code == 201 and replay.headers.get("idempotent-replayed") == "true"
            assert replay.json()["id"] == served.json()["id"]
            listed = survivor.client.get("/v1/evaluators", params={"limit": 200}).json()
            items = listed["data"] if isinstance(listed, dict) else listed
            assert [e["id"] for e in items if e["name"] == name] == [served.json()["id"]]  # one evaluator
            print(
                f"\nafter the SIGKILL: {len(refused)} retries refused ({set(refused)}), then served by {survivor.name}"
            )
    finally:
        proxy.close()
    assert survivor.client.get("/healthz").status_code == 200


def test_a_live_request_longer_than_the_claim_time_keeps_its_key_and_a_retry_elsewhere_replays_its_answer(
    group: Replicas,
) -> None:
    first_replica, other = group.running
    key, name = f"save-{uuid.uuid4().hex}", f"slow-{uuid.uuid4().hex[:8]}"
    headers = {"Idempotency-Key": key}
    body = _body(name, 4 * CLAIM_S)
    thread, first = _in_background(lambda: first_replica.client.post("/v1/evaluators", json=body, headers=headers))
    claimed = wait_until(lambda: _claim(group, key), 60, 0.02, what="the key to be claimed")[0]

    def renewed_past_twice_the_claim() -> bool:
        now = _claim(group, key)
        assert now is not None and now[1] is None, "the first request answered before it outlived its claim"
        return bool((now[0] - claimed).total_seconds() > 2 * CLAIM_S)

    wait_until(renewed_past_twice_the_claim, 60, 0.05, what="the live request to renew its claim past 2 × claim_s")
    early = other.client.post("/v1/evaluators", json=body, headers=headers)
    assert early.status_code == 409, early.text  # the first still runs: its key is not taken
    thread.join(timeout=120)
    answer = first[0]
    assert not isinstance(answer, Exception) and answer.status_code == 201, answer
    late = other.client.post("/v1/evaluators", json=body, headers=headers)
    assert late.status_code == 201 and late.headers.get("idempotent-replayed") == "true"
    assert late.json()["id"] == answer.json()["id"]
