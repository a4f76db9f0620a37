"""The ``otlp`` score sink (issue 52): today's score export, per rule — each score of the rule reaches a real
OTLP/HTTP receiver on loopback as the ``gen_ai.evaluation.result`` span (parented to the evaluated span,
with the event, the attributes and the marker), with the sink's headers (a secret filled in); a failed
evaluation is sent too, as the export sends it; sent again, it is the same span."""

from __future__ import annotations

from pathlib import Path

from tests.support.online import forget_deliveries
from tests.support.otlp import collector
from tests.support.service import serving
from tests.support.sink_app import App, evaluator, settled
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_EGRESS_HOSTS": '{"collector.test": "127.0.0.1"}',
}
GOOD = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.5, 'reason': 'half'}\n"
BAD = "def evaluate(inputs, outputs, trace):\n    return 1 / 0\n"


def test_each_score_of_an_otlp_sink_rule_arrives_as_an_evaluation_span(tmp_path: Path) -> None:
    with collector() as got, serving(tmp_path, "process", env=ENV) as (client, _proc):
        client.put("/v1/secrets/TEAM", json={"value": "evals-team"})
        sink = {"type": "otlp", "url": f"http://collector.test:{got.port}", "headers": {"x-team": "{{secret:TEAM}}"}}
        good = client.post("/v1/online-rules", json={"evaluator_id": evaluator(client, GOOD), "name": "half",
                                                     "sinks": [sink]}).json()  # fmt: skip
        bad = client.post("/v1/online-rules", json={"evaluator_id": evaluator(client, BAD), "name": "broken",
                                                    "sinks": [sink]}).json()  # fmt: skip
        app = App(str(client.base_url))
        trace_id, root, _llm = app.request("4")
        app.provider.shutdown()
        settled(client, good["id"], 1)
        settled(client, bad["id"], 1)
        spans = got.trace(trace_id, {"evaluation half", "evaluation broken"})
        (half,) = spans["evaluation half"]
        assert half.parent_span_id == root and half.events == ["gen_ai.evaluation.result"]
        assert half.attributes["gen_ai.evaluation.score.value"] == 0.5
        assert half.attributes["evaluator_host.rule_id"] == good["id"]
        assert half.attributes["evaluator_host.evaluation"] is True
        (broken,) = spans["evaluation broken"]
        assert broken.status == "ERROR" and broken.attributes["error.type"] == "ZeroDivisionError"
        assert all(h["x-team"] == "evals-team" for h in got.headers)

        forget_deliveries(tmp_path)  # sent again, as after a crash before its record
        again = got.wait_for(lambda s: sum(x.name == "evaluation half" for x in s) == 2, 60)
        assert len({s.span_id for s in again if s.name == "evaluation half"}) == 1  # the same span
        wait_until(lambda: client.get("/healthz").status_code == 200, 10)
