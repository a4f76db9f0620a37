"""Score sinks (issue 52) into a REAL Phoenix server (``arize-phoenix`` from PyPI in a throwaway venv,
SQLite, on loopback: tests/support/phoenix.py): the app exports to evaluator-host only; its spans reach
Phoenix through forwarding; each score is written as a CODE span annotation — a trace-level score on the
root span, a span-level one on its span — read back from Phoenix's REST API; delivered again (the rows
reset, as after a crash between the write and its record), Phoenix still holds one annotation each. A job's
results (``POST /v1/jobs`` with a Phoenix sink, issue 52) land there too: a row naming a span as that span's
annotation, a row naming only its trace as a trace annotation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.online import forget_deliveries
from tests.support.phoenix import phoenix_server
from tests.support.service import serving
from tests.support.sink_app import App, evaluator, forwarding_env, job_delivered, settled, trace_and_span_rules
from tests.support.wait import wait_until

EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.0, 'reason': f'said {outputs}'}\n"
)
JOB_EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.25, 'reason': f'answered {outputs}'}\n"
)
SPAN_EVAL = "def evaluate(inputs, outputs, trace):\n    return {'passed': True, 'label': 'fine'}\n"


def _annotations(phoenix: str, span_ids: list[str]) -> list[dict[str, Any]]:
    params = [("span_ids", s) for s in span_ids] + [("limit", "100")]
    answer = httpx.get(f"{phoenix}/v1/projects/default/span_annotations", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Phoenix server for the module's tests (a start costs seconds of CPU): each reads back only what it wrote
    (its own spans' annotations, its own session's), so what one test sent is not in another's answer."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as base:
        yield base


@pytest.mark.slow
def test_scores_appear_as_phoenix_span_annotations_on_the_forwarded_spans(tmp_path: Path, phoenix: str) -> None:
    port = phoenix.rsplit(":", 1)[1]
    env = forwarding_env(f"{phoenix}/v1/traces", "phoenix.test")
    data = tmp_path / "service"
    with serving(data, "process", env=env) as (client, _proc):
        sink = {"type": "phoenix", "url": f"http://phoenix.test:{port}"}
        trace_rule, span_rule = trace_and_span_rules(client, sink, EVAL, SPAN_EVAL)
        app = App(str(client.base_url))
        sent = [app.request(answer) for answer in ("4", "5")]
        app.provider.shutdown()
        by_trace = {s["trace_id"]: s for s in settled(client, trace_rule["id"], 2)}
        settled(client, span_rule["id"], 2)
        spans = [span for _t, root, llm in sent for span in (root, llm)]
        found = _annotations(phoenix, spans)
        assert len(found) == 4, found
        for trace_id, root, llm in sent:
            score = by_trace[trace_id]
            assert score["sinks"][0]["state"] == "delivered"
            (on_root,) = [a for a in found if a["span_id"] == root]
            assert on_root["name"] == "facts" and on_root["annotator_kind"] == "CODE"
            assert on_root["result"]["score"] == score["score"]
            assert on_root["result"]["explanation"] == score["result"]["reason"]
            assert on_root["identifier"].startswith("evh-")
            assert on_root["metadata"]["rule_id"] == trace_rule["id"]
            (on_llm,) = [a for a in found if a["span_id"] == llm]
            assert (on_llm["name"], on_llm["result"]["label"]) == ("llm-ok", "fine")

        forget_deliveries(data)  # as if the service died between Phoenix's answer and its record

        def resent() -> bool:
            scores = client.get(f"/v1/online-rules/{trace_rule['id']}/scores").json()["data"]
            return all(s["sinks"][0]["state"] == "delivered" and s["sinks"][0]["attempts"] >= 2 for s in scores)

        wait_until(resent, 60, 0.2, what="the deliveries sent again")
        again = _annotations(phoenix, spans)
        assert sorted(a["id"] for a in again) == sorted(a["id"] for a in found)  # upserted, not added


SESSION_EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 0.5, 'label': 'kept', 'reason': 'conversation ' + str(trace['session_id'])}\n"
)


@pytest.mark.slow
def test_a_session_level_score_is_a_phoenix_session_annotation_on_that_session(tmp_path: Path, phoenix: str) -> None:
    port = phoenix.rsplit(":", 1)[1]
    env = forwarding_env(f"{phoenix}/v1/traces", "phoenix.test")
    with serving(tmp_path / "service", "process", env=env) as (client, _proc):
        sink = {"type": "phoenix", "url": f"http://phoenix.test:{port}", "name": "conversation-ok"}
        body = {
            "evaluator_id": evaluator(client, SESSION_EVAL),
            "target": {"level": "session", "quiet_s": 1},
            "sinks": [sink],
        }
        rule = client.post("/v1/online-rules", json=body).json()
        app = App(str(client.base_url))
        for answer in ("4", "5"):
            app.request(answer, session="conv-phx")
        app.provider.shutdown()

        def delivered() -> list[dict[str, Any]] | None:
            listed = client.get(f"/v1/online-rules/{rule['id']}/scores").json()["data"]
            done = [s for s in listed if s["sinks"] and s["sinks"][0]["state"] in ("delivered", "failed")]
            return done if done and len(done) == len(listed) else None

        scored = wait_until(delivered, 120, 0.2, what="the session's score delivered")
        assert {s["sinks"][0]["state"] for s in scored} == {"delivered"}, scored
        answer = httpx.get(
            f"{phoenix}/v1/projects/default/session_annotations", params={"session_ids": "conv-phx"}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        found = answer.json()["data"]
        assert len(found) == len(scored)  # each score of the session (a generation each) once
        one = found[-1]
        assert (one["session_id"], one["name"], one["annotator_kind"]) == ("conv-phx", "conversation-ok", "CODE")
        assert one["result"] == {"score": 0.5, "label": "kept", "explanation": "conversation conv-phx"}
        assert one["identifier"].startswith("evh-") and one["metadata"]["rule_id"] == rule["id"]


@pytest.mark.slow
def test_a_jobs_results_appear_in_phoenix_as_span_and_trace_annotations(tmp_path: Path, phoenix: str) -> None:
    port = phoenix.rsplit(":", 1)[1]
    with serving(tmp_path / "service", "process", env=forwarding_env(f"{phoenix}/v1/traces", "phoenix.test")) as (
        client,
        _proc,
    ):
        app = App(str(client.base_url))
        sent = [app.request(answer) for answer in ("4", "5")]
        app.provider.shutdown()
        rows = [
            {"outputs": "4", "trace_id": sent[0][0], "span_id": sent[0][2]},  # the LLM span
            {"outputs": "5", "trace_id": sent[1][0]},  # the trace only: a trace annotation
        ]
        sink = {"type": "phoenix", "url": f"http://phoenix.test:{port}", "name": "offline-facts"}
        body = {"evaluator_id": evaluator(client, JOB_EVAL), "rows": rows, "sinks": [sink]}
        made = client.post("/v1/jobs", json=body)
        assert made.status_code == 202, made.text
        job_delivered(client, made.json()["id"], 2)

        spans = httpx.get(
            f"{phoenix}/v1/projects/default/span_annotations", params={"span_ids": sent[0][2]}, timeout=30
        ).json()["data"]
        (on_span,) = spans
        assert (on_span["name"], on_span["annotator_kind"]) == ("offline-facts", "CODE")
        assert on_span["result"]["score"] == 1.0
        assert on_span["metadata"]["job_id"] == made.json()["id"] and on_span["metadata"]["row"] == 0
        traces = httpx.get(
            f"{phoenix}/v1/projects/default/trace_annotations", params={"trace_ids": sent[1][0]}, timeout=30
        ).json()["data"]
        (on_trace,) = traces
        assert on_trace["trace_id"] == sent[1][0] and on_trace["result"]["score"] == 0.25
        assert on_trace["result"]["explanation"] == "answered 5" and on_trace["identifier"].startswith("evh-")
