"""A score sink down for a minute (issue 52): every score delivered exactly once when it comes back.

The real service (``evaluator-host serve``, process backend, SQLite in a fresh data dir) scores an
instrumented app's traces (the real OpenTelemetry SDK over OTLP/HTTP) with a trace-level rule whose sink is
the Langfuse stand-in of the tests (``tests/support/langfuse.py``: Langfuse's public score API, checked
request by request). The stand-in stops listening before the first score — every connection refused — and
stays down for ``SINK_DOWN_S`` (default 60) seconds while ``SINK_TRACES`` (default 40) traces are scored; it
then listens again on the same port. Reported: the scores, the attempts each took while it was down (the
back-off: 2 s doubling, jittered), the seconds from "back" until every score was delivered, the requests the
stand-in received and the scores it holds — the run fails (exit 1) unless every score is delivered, each
exactly once (no duplicate id, one request each), nothing refused by the API check, and the service healthy.

Run alone: ``.venv/bin/python -m bench.sink_outage`` (``make soak`` runs it after ``bench.hostile``);
bounded: it gives up ``SINK_DRAIN_S`` (default 600) seconds after the endpoint came back.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import httpx

from bench.common import serving, verdict

DOWN_S = float(os.environ.get("SINK_DOWN_S", "60"))
TRACES = int(os.environ.get("SINK_TRACES", "40"))
DRAIN_S = float(os.environ.get("SINK_DRAIN_S", "600"))
PK, SK = "pk-lf-bench", "sk-lf-bench-secret"
EVAL = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0 if outputs == '4' else 0.0}\n"


def _states(client: httpx.Client, rule: str) -> list[dict[str, object]]:
    listed = client.get(f"/v1/online-rules/{rule}/scores", params={"limit": 1000}).json()["data"]
    return [s["sinks"][0] for s in listed if s["sinks"]]


def main() -> int:
    from tests.support.langfuse import langfuse_stand_in
    from tests.support.sink_app import App, evaluator

    env = {
        "EVALUATOR_HOST_BACKEND": "process",
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
        "EVALUATOR_HOST_EGRESS_HOSTS": '{"langfuse.test": "127.0.0.1"}',
    }
    with tempfile.TemporaryDirectory(prefix="evaluator-host-sink-") as data, langfuse_stand_in(PK, SK) as langfuse:
        with serving(data, env) as (base, _proc), httpx.Client(base_url=base, timeout=60) as client:
            for name, value in (("LF_PK", PK), ("LF_SK", SK)):
                client.put(f"/v1/secrets/{name}", json={"value": value})
            sink = {"type": "langfuse", "url": f"http://langfuse.test:{langfuse.port}",
                    "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}  # fmt: skip
            rule = client.post("/v1/online-rules", json={"evaluator_id": evaluator(client, EVAL), "sinks": [sink]})
            rule_id = rule.json()["id"]
            langfuse.down()
            went_down = time.monotonic()
            app = App(base)
            sent = {app.request("4" if i % 2 else "5")[0] for i in range(TRACES)}
            app.provider.shutdown()
            while time.monotonic() - went_down < DOWN_S:
                time.sleep(1)
            tried = _states(client, rule_id)
            down_attempts = sorted(int(str(s["attempts"])) for s in tried)
            langfuse.up()
            back = time.monotonic()
            while time.monotonic() - back < DRAIN_S:
                states = _states(client, rule_id)
                if len(states) == TRACES and all(s["state"] in ("delivered", "failed") for s in states):
                    break
                time.sleep(0.5)
            drained = time.monotonic() - back
            states = _states(client, rule_id)
            healthy = client.get("/healthz").status_code == 200
        delivered = [s for s in states if s["state"] == "delivered"]
        written = sorted(w["traceId"] for w in langfuse.scores.values())
        once = len({w["id"] for w in langfuse.scores.values()}) == len(written) == len(langfuse.requests)
        ok = len(delivered) == TRACES and written == sorted(sent) and once and not langfuse.refused and healthy
        low, high = (down_attempts[0], down_attempts[-1]) if down_attempts else (0, 0)
        print(f"sink down {DOWN_S:.0f} s, {TRACES} scores; attempts while down: min {low}, max {high} "
              f"(scores tried: {len(down_attempts)})")  # fmt: skip
        print(f"back: every score delivered in {drained:.1f} s; delivered {len(delivered)}/{TRACES}; "
              f"requests received {len(langfuse.requests)}, scores held {len(written)}, "
              f"refused by the API check {len(langfuse.refused)}; healthy {healthy}")  # fmt: skip
        print(f"exactly once: {verdict(ok)}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
