"""``evaluator-host demo-traffic``: an instrumented chat app's traces, sent with the real OpenTelemetry SDK.

What a new user runs to see online evaluation work before instrumenting their own app: ``N`` request
traces, each a ``chat`` SERVER span (the app's request) with an ``llm`` CLIENT child (the model call)
carrying the OpenTelemetry GenAI semantic conventions — ``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
the prompt and the completion as ``gen_ai.input.messages``/``gen_ai.output.messages`` JSON — and no
``ag.data`` attributes, so the service's GenAI mapping gives evaluators their ``inputs``/``outputs``.
Some answers are right, some wrong, so scores differ. The spans go through the SDK's own pipeline
(``TracerProvider`` → ``BatchSpanProcessor`` → ``OTLPSpanExporter``, OTLP/HTTP protobuf) to
``--server``'s ``/v1/traces`` with ``Authorization: Bearer --api-key`` — exactly what an app does
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_HEADERS``. The exit code is 1 when an
export failed (the exporter's answer is counted, not assumed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from evaluator_host.cli.inputs import UsageError

__all__ = ["add_parser"]

API_KEY_ENV = "EVALUATOR_HOST_API_KEY"
# (question, answer, the answer is right)
_QA = (
    ("What is the capital of France?", "The capital of France is Paris.", True),
    ("What is the capital of Australia?", "The capital of Australia is Sydney.", False),
    ("How many legs does a spider have?", "A spider has eight legs.", True),
    ("What is 12 times 12?", "12 times 12 is 144.", True),
    ("Who wrote 'Pride and Prejudice'?", "'Pride and Prejudice' was written by Charlotte Brontë.", False),
    ("What is the boiling point of water at sea level in Celsius?", "Water boils at 100 °C at sea level.", True),
    ("Which planet is closest to the Sun?", "Venus is the planet closest to the Sun.", False),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au.", True),
)
_MODEL = "gpt-4o-mini"


def add_parser(sub: Any) -> None:
    """The ``demo-traffic`` subcommand."""
    demo = sub.add_parser(
        "demo-traffic",
        help="send instrumented chat traces (real OpenTelemetry SDK, OTLP/HTTP) to a running service",
    )
    demo.add_argument("-n", "--traces", type=int, default=20, help="request traces to send (default 20)")
    demo.add_argument("--server", help="URL of the service (default: http://HOST:PORT of the settings)")
    demo.add_argument("--api-key", help=f"bearer key of the workspace to send to (default: {API_KEY_ENV})")
    demo.add_argument("--service-name", default="demo-chat", help="the app's service.name (default demo-chat)")
    demo.add_argument("--rate", type=float, default=20.0, help="traces per second at most (default 20)")
    demo.add_argument("--seed", type=int, help="pick the questions reproducibly")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Send the traces; print what was sent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if args.traces < 1 or args.rate <= 0:
        raise UsageError("--traces must be at least 1 and --rate above 0")
    from evaluator_host.settings import Settings

    settings = Settings()
    server = (args.server or f"http://{settings.host}:{settings.port}").rstrip("/")
    key = args.api_key or os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    exporter = _Counting(OTLPSpanExporter(endpoint=f"{server}/v1/traces", headers=headers, timeout=10))
    trace_ids = send(exporter, args.traces, args.service_name, args.rate, random.Random(args.seed))
    sent, failed = exporter.sent, exporter.failed
    sys.stdout.write(f"sent {len(trace_ids)} traces ({sent} spans) to {server}/v1/traces as {args.service_name!r}\n")
    if failed:
        sys.stderr.write(
            f"evaluator-host: {failed} spans were not accepted (is the service running at {server}, and the key "
            f"right? --api-key or {API_KEY_ENV}); the exporter's log above says why\n"
        )
        return 1
    sys.stdout.write(f"last trace: {trace_ids[-1]} (GET {server}/v1/traces/{trace_ids[-1]} once a rule scored it)\n")
    return 0


def send(exporter: Any, n: int, service_name: str, rate: float, rng: random.Random) -> list[str]:
    """``n`` chat traces through a fresh SDK pipeline ending in ``exporter``; their hex trace ids."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name, "deployment.environment": "demo"})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    tracer = provider.get_tracer("evaluator-host.demo-traffic")
    trace_ids = []
    try:
        for i in range(n):
            started = time.monotonic()
            question, answer, _ = _QA[rng.randrange(len(_QA))]
            request = {"http.request.method": "POST", "http.route": "/chat", "user.id": f"demo-user-{i % 5}"}
            with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=request) as root:
                with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT, attributes=_llm(question)) as llm:
                    time.sleep(rng.uniform(0.001, 0.01))  # the "model call"
                    llm.set_attributes(_completion(question, answer))
                    llm.set_status(Status(StatusCode.OK))
                root.set_status(Status(StatusCode.OK))
                trace_ids.append(format(root.get_span_context().trace_id, "032x"))
            time.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
        provider.force_flush(30_000)
    finally:
        provider.shutdown()
    return trace_ids


def _llm(question: str) -> dict[str, Any]:
    messages = [
        {"role": "system", "parts": [{"type": "text", "content": "Answer in one sentence."}]},
        {"role": "user", "parts": [{"type": "text", "content": question}]},
    ]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": _MODEL,
        "gen_ai.request.temperature": 0.0,
        "gen_ai.input.messages": json.dumps(messages),
    }


def _completion(question: str, answer: str) -> dict[str, Any]:
    output = [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]
    return {
        "gen_ai.response.model": _MODEL,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 12 + len(question) // 4,
        "gen_ai.usage.output_tokens": 2 + len(answer) // 4,
        "gen_ai.output.messages": json.dumps(output),
    }


class _Counting:
    """A span exporter that counts what its inner exporter accepted and refused."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
