"""Issue 54: three real ``evaluator-host serve`` replicas (process backend, one PostgreSQL, a data dir each)
behind Debian's HAProxy (round robin, health checks on ``/healthz``). A client that only knows HAProxy's
address evaluates Python/JavaScript/TypeScript, makes an evaluator and its revisions and runs each by id,
sends OTLP traces and reads their scores, uploads a dataset through one replica, starts its job through the next
and pages its results through the third — each request served by another replica than the one before
(``X-Replica``, and HAProxy's own per-server counters). Then one replica is SIGKILLed: HAProxy's health
check takes it out and every request still succeeds, the client retrying as a real one would (at most
twice, on a 502/503/504 or a refused connection)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.backends import postgres_only
from tests.support.haproxy import HAPROXY, HAProxy
from tests.support.otlp_bodies import JSON, S, json_body, new_span_id, new_trace_id
from tests.support.pg import Cluster
from tests.support.replicas import Replicas
from tests.support.wait import wait_until

PY = "def evaluate(inputs, outputs, trace):\n    return 1.0 if outputs == inputs.get('expected') else 0.0\n"
JS = "function evaluate(inputs, outputs, trace) {\n  return outputs === inputs.expected ? 1 : 0\n}\n"
TS = "function evaluate(inputs: any, outputs: string, trace: any): number {\n  return outputs.length\n}\n"
REVISION = "def evaluate(inputs, outputs, trace):\n    return {revision}.0\n"
ONLINE = {  # traces ready soon after their last span, scored promptly
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
RETRIES = 2  # what a real client does: a couple of retries on a gateway error or a refused connection


class Client:
    """HAProxy's one address; every answer's replica (``X-Replica``) in :attr:`seen`."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.seen: list[str] = []
        self.retried = 0

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(RETRIES + 1):
            try:
                answer = self.http.request(method, path, **kw)
            except httpx.TransportError:
                if attempt == RETRIES:
                    raise
            else:
                if answer.status_code not in (502, 503, 504) or attempt == RETRIES:
                    self.seen.append(answer.headers.get("x-replica", "?"))
                    return answer
            self.retried += 1
            time.sleep(0.2 * (attempt + 1))  # a client's back-off before its retry, not a wait on the system
        raise AssertionError("unreachable")


@pytest.fixture
def deployment(tmp_path: Path, postgres: Cluster) -> Iterator[tuple[Replicas, HAProxy, Client]]:
    if not Path(HAPROXY).exists():
        pytest.fail("haproxy is not installed (.ci/run installs Debian's package)")
    group = Replicas(tmp_path / "replicas", postgres.database(driver="postgresql"), "process", dict(ONLINE))
    proxy: HAProxy | None = None
    try:
        for name in ("r0", "r1", "r2"):
            group.start(name)
        ports = {r.name: int(r.client.base_url.port or 0) for r in group.running}
        proxy = HAProxy(tmp_path, ports)
        with proxy.client() as http:
            yield group, proxy, Client(http)
    finally:
        if proxy is not None:
            proxy.close()
        group.close()


def _spread(seen: list[str], replicas: set[str]) -> None:
    """Every replica served, and no request went to the replica that served the one before."""
    assert set(seen) == replicas, seen
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False)), seen


def _traces(client: Client, n: int) -> list[str]:
    sent = []
    for i in range(n):
        trace, root = new_trace_id(), new_span_id()
        spans = [
            S(
                trace,
                root,
                name="chat",
                attributes={
                    "ag.data.inputs": json.dumps({"expected": "yes"}),
                    "ag.data.outputs": "yes" if i % 2 else "no",
                },
            ),  # fmt: skip
            S(trace, new_span_id(), parent=root, name="llm"),
        ]
        answer = client.call("POST", "/v1/traces", content=json_body(spans), headers=JSON)
        assert answer.status_code == 200, answer.text
        sent.append(trace)
    return sent


def _run_everything(client: Client, tag: str) -> None:
    """Every kind of request through HAProxy (asserting each answer)."""
    for language, code, expected in (("python", PY, 1.0), ("javascript", JS, 1.0), ("typescript", TS, 3.0)):
        body = {"language": language, "code": code, "inputs": {"expected": "yes"}, "outputs": "yes"}
        answer = client.call("POST", "/v1/evaluate", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ok" and answer.json()["score"] == expected, answer.text

    made = client.call("POST", "/v1/evaluators", json={"name": f"rev-{tag}", "language": "python",
                                                       "code": REVISION.format(revision=1)})  # fmt: skip
    assert made.status_code == 201, made.text
    evaluator = made.json()["id"]
    put = client.call("PUT", f"/v1/evaluators/{evaluator}", json={"name": f"rev-{tag}", "language": "python",
                                                                  "code": REVISION.format(revision=2)})  # fmt: skip
    assert put.status_code == 200 and put.json()["revision"] == 2, put.text
    patched = client.call("PATCH", f"/v1/evaluators/{evaluator}", json={"code": REVISION.format(revision=3)})
    assert patched.status_code == 200 and patched.json()["revision"] == 3, patched.text
    for revision in (1, 2, 3):  # each revision by id, each on whichever replica comes next
        ran = client.call("POST", f"/v1/evaluators/{evaluator}/evaluate", json={"outputs": "x", "revision": revision})
        assert ran.status_code == 200 and ran.json()["score"] == float(revision), ran.text
        assert ran.json()["revision"] == revision
    latest = client.call("POST", f"/v1/evaluators/{evaluator}/evaluate", json={"outputs": "x"})
    assert latest.status_code == 200 and latest.json()["score"] == 3.0, latest.text  # the latest, wherever
    listed = client.call("GET", f"/v1/evaluators/{evaluator}/revisions")
    assert listed.status_code == 200 and len(listed.json()["data"] if "data" in listed.json() else listed.json()) == 3

    scorer = client.call("POST", "/v1/evaluators", json={"name": f"online-{tag}", "language": "python", "code": PY})
    assert scorer.status_code == 201, scorer.text
    rule = client.call("POST", "/v1/online-rules", json={"evaluator_id": scorer.json()["id"]})
    assert rule.status_code == 201, rule.text
    sent = _traces(client, 6)

    def scored() -> dict[str, float] | None:
        page = client.call("GET", f"/v1/online-rules/{rule.json()['id']}/scores")
        assert page.status_code == 200, page.text
        found = {s["trace_id"]: s["score"] for s in page.json()["data"] if s["state"] == "done"}
        return found if len(found) == len(sent) else None

    scores = wait_until(scored, 120, 0.1, what="the traces' scores, read through HAProxy")
    assert scores == {t: (1.0 if i % 2 else 0.0) for i, t in enumerate(sent)}

    # a dataset uploaded through one replica, its job started through the next, its results paged through the rest
    # (datasets' rows are in PostgreSQL: no replica's data dir holds them)
    rows = "".join(
        json.dumps({"i": i, "expected": "yes", "outputs": "yes" if i % 2 else "no"}) + "\n" for i in range(60)
    )
    dataset = client.call("POST", "/v1/datasets", content=rows, headers={"content-type": "application/jsonl"})
    assert dataset.status_code == 201, dataset.text
    uploaded_through = client.seen[-1]
    job = client.call(
        "POST", "/v1/jobs", json={"evaluator_id": scorer.json()["id"], "dataset_id": dataset.json()["id"]}
    )
    assert job.status_code == 202, job.text
    started_through = client.seen[-1]
    finished = wait_until(
        lambda: (
            (j := client.call("GET", f"/v1/jobs/{job.json()['id']}", params={"wait_s": 10}).json())["status"]
            not in ("queued", "running")
            and j
        ),
        120,
        0.05,
        what="the job, read through HAProxy",
    )
    assert finished["status"] == "succeeded" and finished["progress"]["done"] == 60, finished
    indices, paged_through, offset = [], set(), 0
    while offset is not None:
        page = client.call("GET", f"/v1/jobs/{job.json()['id']}/results", params={"offset": offset, "limit": 20})
        assert page.status_code == 200, page.text
        paged_through.add(client.seen[-1])
        indices += [r["index"] for r in page.json()["data"]]
        offset = page.json()["next_offset"]
    assert sorted(indices) == list(range(60))  # every row once, whichever replica read it
    assert uploaded_through != started_through
    if tag == "three":  # three replicas: the results were read through the one that neither stored nor started
        assert paged_through - {uploaded_through, started_through}, (uploaded_through, started_through, paged_through)


@postgres_only
@pytest.mark.slow
def test_every_kind_of_request_through_haproxy_lands_on_each_replica_and_survives_a_sigkilled_one(
    deployment: tuple[Replicas, HAProxy, Client],
) -> None:
    group, proxy, client = deployment
    before = proxy.served()
    _run_everything(client, "three")
    _spread(client.seen, {"r0", "r1", "r2"})
    counted = {name: n - before[name] for name, n in proxy.served().items()}
    assert all(n >= len(client.seen) // 3 - 1 for n in counted.values()), counted  # HAProxy's count agrees
    assert sum(counted.values()) == len(client.seen) + client.retried, (counted, client.seen)
    print(f"\nthrough haproxy: {len(client.seen)} requests, per replica {counted}")

    killed = group.running[1]
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait(timeout=30)
    client.seen.clear()
    _run_everything(client, "two")  # no wait for the health check: the client's retries carry it
    assert set(client.seen) == {"r0", "r2"}, client.seen
    wait_until(lambda: proxy.up() == ["r0", "r2"], 30, 0.05, what="haproxy's health check to take r1 out")
    print(f"after the SIGKILL: {len(client.seen)} requests, {client.retried} retried, served by {set(client.seen)}")
    for replica in (group.running[0], group.running[2]):
        assert replica.client.get("/healthz").status_code == 200
