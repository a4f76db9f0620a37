"""Score sinks (issue 52) into Langfuse, against a loopback stand-in that checks every request against
Langfuse's public API reference (tests/support/langfuse.py): the real service scores an instrumented app's
traces and writes each score once — retried through 503s, recorded once when an answer is lost after the
write (the score's ``id`` is its idempotency key) — with the delivery state on the score; credentials are
secret references, never shown; a sink whose host the rule may not reach fails and sends nothing."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx

from evaluator_host.sinks.delivery import IN_FLIGHT_S, LEASE_S
from tests.support import REPO, zygote
from tests.support.langfuse import langfuse_stand_in
from tests.support.service import serving
from tests.support.sink_app import App, evaluator, scores, settled
from tests.support.wait import wait_until

PK, SK = "pk-lf-1234567890", "sk-lf-secret-0987654321"
ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_EGRESS_HOSTS": '{"langfuse.test": "127.0.0.1"}',
    "EVALUATOR_HOST_SINK_RETRY_S": "0.25",  # a write refused (503) or whose answer was lost: retried in 0.25 s, not 2
}
TRACE_EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.25, 'reason': f'answered {outputs}'}\n"
)
SPAN_EVAL = "def evaluate(inputs, outputs, trace):\n    return {'passed': bool(trace), 'reason': 'has a trace'}\n"


def test_scores_are_written_to_langfuse_once_each_with_its_exact_api_shapes(tmp_path: Path, database_url: str) -> None:
    service = serving(tmp_path, "process", database_url=database_url, env=ENV)  # SQLite and PostgreSQL
    with langfuse_stand_in(PK, SK) as langfuse, service as (client, _proc):
        for name, value in (("LF_PK", PK), ("LF_SK", SK)):
            assert client.put(f"/v1/secrets/{name}", json={"value": value}).status_code in (200, 201, 204)
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        literal = client.post("/v1/online-rules", json={"evaluator_id": "ev_x", "sinks": [{**sink, "secret_key": SK}]})
        assert literal.status_code == 422 and SK not in literal.text  # a credential is a secret reference only
        body = {"evaluator_id": evaluator(client, TRACE_EVAL), "name": "facts", "sinks": [sink]}
        made = client.post("/v1/online-rules", json=body)
        assert made.status_code == 201, made.text
        trace_rule = made.json()
        assert [{k: v for k, v in x.items() if v not in (None, {})} for x in trace_rule["sinks"]] == [sink]
        span_body = {
            "evaluator_id": evaluator(client, SPAN_EVAL),
            "name": "llm-ok",
            "target": {"level": "span"},
            "filter": {"attributes": [{"key": "gen_ai.operation.name", "equals": "chat"}]},
            "sinks": [{**sink, "name": "llm call ok"}],
        }
        span_rule = client.post("/v1/online-rules", json=span_body).json()
        langfuse.fail_next, langfuse.store_then_fail = 2, True  # the first two writes land, their answers are lost

        app = App(str(client.base_url))
        sent = [app.request(answer) for answer in ("4", "5", "4")]
        app.provider.shutdown()
        by_trace = {s["trace_id"]: s for s in settled(client, trace_rule["id"], 3)}
        by_span = {s["span_id"]: s for s in settled(client, span_rule["id"], 3)}

        assert langfuse.refused == []  # every request met the API reference
        assert len(langfuse.scores) == 6  # recorded once each, though 2 were sent twice
        assert len(langfuse.requests) == 8
        assert max(s["sinks"][0]["attempts"] for s in [*by_trace.values(), *by_span.values()]) >= 2
        for trace_id, _root, llm in sent:
            score = by_trace[trace_id]
            (state,) = score["sinks"]
            assert state == {"type": "langfuse", "state": "delivered", "attempts": state["attempts"], "error": None}
            written = [w for w in langfuse.scores.values() if w["traceId"] == trace_id and w["name"] == "facts"]
            assert len(written) == 1
            (one,) = written
            assert one["id"].startswith("evh-") and "observationId" not in one  # a trace-level score
            assert one["dataType"] == "NUMERIC" and one["value"] == score["score"]
            assert one["comment"] == score["result"]["reason"]
            assert one["metadata"]["rule_id"] == trace_rule["id"] and one["metadata"]["revision"] == score["revision"]
            assert one["metadata"]["runtime_id"] == score["runtime_id"]
            span_written = [w for w in langfuse.scores.values() if w.get("observationId") == llm]
            assert [(w["name"], w["dataType"], w["value"], w["traceId"]) for w in span_written] == [
                ("llm call ok", "BOOLEAN", 1, trace_id)
            ]
            assert by_span[llm]["sinks"][0]["state"] == "delivered"
        auth = httpx.BasicAuth(PK, SK)
        some = next(iter(langfuse.scores))
        assert httpx.get(f"http://127.0.0.1:{langfuse.port}/api/public/scores/{some}", auth=auth).json()["id"] == some
        shown = client.get(f"/v1/online-rules/{trace_rule['id']}").text + client.get("/v1/traces").text
        assert SK not in shown and PK not in shown
        command = [sys.executable, "-m", "evaluator_host.cli", "rules", "scores", trace_rule["id"], "--server"]
        listed = zygote.run([*command, str(client.base_url)], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and listed.stdout.count("langfuse:delivered") == 3, listed.stdout + listed.stderr


def test_a_sink_the_rule_may_not_reach_fails_and_sends_nothing(tmp_path: Path) -> None:
    with langfuse_stand_in(PK, SK) as langfuse, serving(tmp_path, "process", env=ENV) as (client, _proc):
        for name, value in (("LF_PK", PK), ("LF_SK", SK)):
            client.put(f"/v1/secrets/{name}", json={"value": value})
        sinks = [
            {"type": "langfuse", "url": f"http://{host}:{langfuse.port}", "public_key": "{{secret:LF_PK}}",
             "secret_key": "{{secret:LF_SK}}"}
            for host in ("127.0.0.1", "localhost")  # an IP literal; a name neither pinned nor public
        ]  # fmt: skip
        rule = client.post("/v1/online-rules", json={"evaluator_id": evaluator(client, TRACE_EVAL), "sinks": sinks})
        app = App(str(client.base_url))
        app.request("4")
        app.provider.shutdown()
        (score,) = settled(client, rule.json()["id"], 1)
        states = score["sinks"]
        assert [s["state"] for s in states] == ["failed", "failed"]
        assert "IP literal" in states[0]["error"] and "localhost" in states[1]["error"]
        assert langfuse.requests == []
        assert client.get("/healthz").status_code == 200


def test_deliveries_survive_a_sigkill_and_a_down_endpoint_and_are_recorded_once(tmp_path: Path) -> None:
    with langfuse_stand_in(PK, SK) as langfuse:
        langfuse.fail_next = 10**9  # down: every request answers 503, nothing stored
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        with serving(tmp_path, "process", env=ENV) as (client, proc):
            for name, value in (("LF_PK", PK), ("LF_SK", SK)):
                client.put(f"/v1/secrets/{name}", json={"value": value})
            body = {"evaluator_id": evaluator(client, TRACE_EVAL), "name": "facts", "sinks": [sink]}
            rule = client.post("/v1/online-rules", json=body).json()["id"]
            app = App(str(client.base_url))
            sent = [app.request(answer) for answer in ("4", "5", "4")]
            app.provider.shutdown()

            def refused() -> bool:
                listed = scores(client, rule)
                tried = [s for s in listed if s["sinks"] and s["sinks"][0]["attempts"] >= 1]
                return len(tried) == 3 and all((s["sinks"][0]["error"] or "").startswith("HTTP 503") for s in tried)

            wait_until(refused, 120, 0.2, what="every delivery refused by the down endpoint")
            proc.kill()  # SIGKILL: claims, back-offs and all are left as they are
            proc.wait()
        with langfuse.lock:
            langfuse.fail_next, langfuse.store_then_fail = 1, True  # back up; the first answer lost after its write
        with serving(tmp_path, "process", env=ENV) as (client, _proc):
            delivered = settled(client, rule, 3)
        assert all(s["sinks"][0]["state"] == "delivered" for s in delivered)
        assert langfuse.refused == []
        assert sorted(w["traceId"] for w in langfuse.scores.values()) == sorted(t for t, _r, _l in sent)
        assert len({w["id"] for w in langfuse.scores.values()}) == 3  # one each, whatever was sent again


def test_a_delivery_in_flight_when_its_service_is_killed_is_sent_again_by_the_restart_within_its_timeout_not_the_lease(
    tmp_path: Path,
) -> None:
    """The service is SIGKILLed while Langfuse holds its request unanswered: the delivery stays claimed
    (``sending``) by that process for the claim's lease, a minute (``sinks/delivery.LEASE_S``). The same service
    started again (its data dir: its service id) makes its previous process's claims end past what their request
    could still take at the tool (``IN_FLIGHT_S``, 20 s from the restart), and the score is sent again then, not
    a minute on: recorded once, under its idempotency key, though both sends reached the tool."""
    hold = threading.Event()
    with langfuse_stand_in(PK, SK) as langfuse:
        langfuse.hold = hold
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        with serving(tmp_path, "process", env=ENV) as (client, proc):
            for name, value in (("LF_PK", PK), ("LF_SK", SK)):
                client.put(f"/v1/secrets/{name}", json={"value": value})
            rule = client.post(
                "/v1/online-rules", json={"evaluator_id": evaluator(client, TRACE_EVAL), "sinks": [sink]}
            )
            rule_id = rule.json()["id"]
            app = App(str(client.base_url))
            sent = [app.request("4")]
            app.provider.shutdown()
            wait_until(lambda: langfuse.held == 1, 120, 0.05, what="the delivery in flight, held by the endpoint")
            claimed = time.monotonic()  # just after the claim: its request reached the tool
            proc.kill()
            proc.wait()
        langfuse.hold = None
        hold.set()  # the killed sender's request goes on: the tool writes it, and its answer finds no one
        with serving(tmp_path, "process", env=ENV) as (client, _proc):
            (delivered,) = settled(client, rule_id, 1)
        took = time.monotonic() - claimed
        assert delivered["sinks"][0]["state"] == "delivered" and delivered["sinks"][0]["attempts"] == 2
        bound = (IN_FLIGHT_S + LEASE_S) / 2  # past the in-flight bound, well short of the lease
        assert took < bound, f"delivered {took:.1f} s after the claim: the dead process's whole lease was waited out"
        assert len(langfuse.requests) == 2  # the dead process's send and the restarted service's, one score id
        assert [w["traceId"] for w in langfuse.scores.values()] == [sent[0][0]]  # written once
        assert langfuse.refused == []


def test_an_endpoint_refusing_connections_for_three_retries_gets_every_score_once_when_back(tmp_path: Path) -> None:
    env = {**ENV, "EVALUATOR_HOST_SINK_RETRY_S": "0.25"}  # the same retries as at 2 s, an eighth of the wait
    with langfuse_stand_in(PK, SK) as langfuse, serving(tmp_path, "process", env=env) as (client, _proc):
        for name, value in (("LF_PK", PK), ("LF_SK", SK)):
            client.put(f"/v1/secrets/{name}", json={"value": value})
        langfuse.down()  # nothing listens on its port: every connection refused
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        rule = client.post("/v1/online-rules", json={"evaluator_id": evaluator(client, TRACE_EVAL), "sinks": [sink]})
        rule_id = rule.json()["id"]
        app = App(str(client.base_url))
        sent = [app.request(answer) for answer in ("4", "5", "4", "6")]
        app.provider.shutdown()

        def retried() -> bool:  # every score tried 4 times at least: 3 retries all refused
            listed = scores(client, rule_id)
            tried = [s["sinks"][0] for s in listed if s["sinks"]]
            return len(tried) == 4 and all(x["attempts"] >= 4 and x["state"] == "pending" for x in tried)

        wait_until(retried, 180, 0.2, what="three retries of every score against the down endpoint")
        errors = {s["sinks"][0]["error"] for s in scores(client, rule_id)}
        assert errors == {f"ConnectError calling langfuse.test:{langfuse.port}"}, errors
        assert langfuse.requests == []
        langfuse.up()
        delivered = settled(client, rule_id, 4)
        assert all(s["sinks"][0]["state"] == "delivered" and s["sinks"][0]["attempts"] >= 5 for s in delivered)
        assert len(langfuse.requests) == 4 and langfuse.refused == []  # each sent once it was back, no duplicate
        keys = {s["trace_id"]: s for s in delivered}
        assert sorted(w["traceId"] for w in langfuse.scores.values()) == sorted(t for t, _r, _l in sent)
        assert len({w["id"] for w in langfuse.scores.values()}) == 4
        for written in langfuse.scores.values():
            assert written["metadata"]["rule_id"] == rule_id and written["value"] == keys[written["traceId"]]["score"]
        assert client.get("/healthz").status_code == 200
