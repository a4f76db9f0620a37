"""The HTTP request that writes one score into one sink (pure: no I/O).

* ``phoenix`` — ``POST {url}/v1/span_annotations?sync=true`` (Phoenix's REST API, ``annotateSpans``):
  ``{"data": [{"span_id", "name", "annotator_kind": "CODE", "result": {"label", "score", "explanation"},
  "metadata", "identifier"}]}``. The span: a span-level score's span; a trace-level score's root span
  (the trace's root, else the evaluated span). ``identifier`` is the delivery key: Phoenix upserts on
  (name, span, identifier), so a repeated delivery overwrites. ``sync=true`` makes Phoenix answer 404
  while the span has not arrived (forwarding may still be sending it): retried. A session-level score is a
  session annotation instead — ``POST {url}/v1/session_annotations?sync=true`` with ``session_id`` (Phoenix
  keys sessions by the spans' ``session.id``; 404 while it has not arrived: retried) — and a job's row that
  names a trace but no span a trace annotation, ``POST {url}/v1/trace_annotations?sync=true`` with
  ``trace_id`` (both: the same fields, upserted on (name, session or trace, identifier)).
* ``langfuse`` — ``POST {url}/api/public/scores`` (Langfuse's public API, ``ScoreBody`` /
  ``CreateScoreRequest``; Basic authorization public key : secret key): ``{"id", "traceId",
  "observationId"? (a span-level score's span), "name", "value", "dataType", "comment"?, "metadata"}``.
  ``value``/``dataType``: the result's numeric score → ``NUMERIC``; else ``passed`` → ``BOOLEAN`` (1 or 0);
  else its ``label`` → ``CATEGORICAL`` (the text). ``id`` is the delivery key: Langfuse upserts scores on
  ``id``. The OpenTelemetry hex ids are Langfuse's trace and observation ids of spans it received over OTLP.
  A session-level score is a session score: ``sessionId`` instead of ``traceId``.

* ``otlp`` — ``POST {url}`` (``/v1/traces`` appended to a URL without a path) of an OTLP/HTTP protobuf
  ``ExportTraceServiceRequest`` holding the span ``online/scoring/export.py`` sends for a score (``evaluation {name}``,
  parented to the evaluated span, the ``gen_ai.evaluation.result`` event and attributes, the
  ``evaluator_host.evaluation`` marker), its span id derived from the delivery key: sent again, it is the
  same span. A failed evaluation is sent too (``error.type``, status ERROR), as the export does.
* ``mlflow`` — MLflow 3's trace assessments: ``GET {url}/api/3.0/mlflow/traces/tr-{trace id}`` first (404 while
  the trace has not arrived: retried) — an assessment whose ``metadata["evaluator_host.key"]`` is the delivery
  key means it is recorded already (MLflow has no idempotency key: deduplicated by (rule, target,
  revision)) —, then ``POST {url}/api/3.0/mlflow/traces/tr-{trace id}/assessments`` with ``{"assessment":
  {"assessment_name", "trace_id", "span_id"? (a span-level score's span), "source": {"source_type": "CODE",
  "source_id": "evaluator-host"}, "feedback": {"value"}, "rationale"?, "metadata"}}`` (``value``: the score,
  else ``passed``, else the label; metadata values as text, as MLflow stores them).

A result that is not ``ok`` (an evaluator error, a timeout) or has no value has nothing to write: the
delivery ends ``skipped`` with the reason. A job's row result (``delivery.source == "job"``) is sent the same
way, its ``metadata`` naming the job and the row instead of a rule and target.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from evaluator_host.observability.tracing import MARKER, traces_url
from evaluator_host.online.scoring.export import EVENT_NAME, evaluation_attributes
from evaluator_host.store.sinks.deliveries import Delivery
from evaluator_host.tenancy.models import SECRET_REF

__all__ = ["Outbound", "Skip", "build", "secret_names"]

_HEX = re.compile("[0-9a-f]+")
_TEXT = 4096  # an explanation's characters sent (the stored result keeps it whole)


@dataclass(frozen=True)
class Outbound:
    """One request: where, its headers (secrets filled in) and its JSON body; ``recorded``: a URL to read
    first, whose answer says whether the score is recorded already (MLflow)."""

    url: str
    headers: dict[str, str]
    body: dict[str, Any]
    recorded: str | None = None
    content: bytes | None = None  # sent instead of ``body`` (OTLP protobuf)


KEY_METADATA = "evaluator_host.key"


def recorded(answer: Any, key: str) -> bool:
    """Whether MLflow's ``GET traces/{id}`` answer holds an assessment with our delivery ``key``."""
    info = (answer or {}).get("trace", {}).get("trace_info", {}) if isinstance(answer, dict) else {}
    return any((a.get("metadata") or {}).get(KEY_METADATA) == key for a in info.get("assessments") or [])


class Skip(Exception):
    """Nothing to write for this score (the reason)."""


def secret_names(spec: dict[str, Any]) -> list[str]:
    """The secrets a sink refers to, each once."""
    values = [
        spec.get("api_key"),
        spec.get("public_key"),
        spec.get("secret_key"),
        *(spec.get("headers") or {}).values(),
    ]
    return list(dict.fromkeys(n for v in values if isinstance(v, str) for n in SECRET_REF.findall(v)))


def _fill(template: str | None, secrets: dict[str, str]) -> str:
    return SECRET_REF.sub(lambda m: secrets[m.group(1)], template or "")


def _name(spec: dict[str, Any], delivery: Delivery) -> str:
    return str(spec.get("name") or delivery.rule.name or delivery.rule.id)


def _reason(delivery: Delivery) -> str | None:
    result = delivery.result or {}
    reason = result.get("reason") or result.get("explanation")
    return str(reason)[:_TEXT] if reason else None


def _metadata(delivery: Delivery) -> dict[str, Any]:
    if delivery.source == "job":
        return {
            "source": "evaluator-host",
            "job_id": delivery.rule_id,
            "row": int(delivery.target_id),
            "evaluator_id": delivery.evaluator_id,
            "revision": delivery.revision,
            "runtime_id": delivery.runtime_id,
            **({"session_id": delivery.session_id} if delivery.session_id else {}),
        }
    return {
        "source": "evaluator-host",
        "rule_id": delivery.rule_id,
        "evaluator_id": delivery.evaluator_id,
        "revision": delivery.revision,
        "runtime_id": delivery.runtime_id,
        "target_id": delivery.target_id,
    }


def build(delivery: Delivery, secrets: dict[str, str]) -> Outbound:
    """The request writing ``delivery``'s score into its sink; :class:`Skip` when there is nothing to write."""
    spec = delivery.spec
    if not spec:
        raise Skip("the rule no longer has this sink")
    if delivery.status != "ok" and spec["type"] != "otlp":  # an OTLP span carries the error type
        raise Skip(f"the evaluation ended {delivery.status}: no value to write")
    if delivery.source == "job" and spec["type"] != "langfuse":  # Langfuse's ids are any text; the others' hex
        if not _HEX.fullmatch(delivery.trace_id) or len(delivery.trace_id) != 32:
            raise Skip(f"the row's trace_id {delivery.trace_id[:40]!r} is not 32 hex digits (an OpenTelemetry id)")
        if delivery.span_id is not None and (not _HEX.fullmatch(delivery.span_id) or len(delivery.span_id) != 16):
            raise Skip(f"the row's span_id {delivery.span_id[:40]!r} is not 16 hex digits (an OpenTelemetry id)")
    headers = {name: _fill(value, secrets) for name, value in (spec.get("headers") or {}).items()}
    headers["Content-Type"] = "application/json"
    url = str(spec["url"]).rstrip("/")
    if spec["type"] == "phoenix":
        return _phoenix(delivery, spec, url, headers, secrets)
    if spec["type"] == "mlflow":
        return _mlflow(delivery, spec, url, headers, secrets)
    if spec["type"] == "otlp":
        return _otlp(delivery, spec, url, headers)
    return _langfuse(delivery, spec, url, headers, secrets)


def _phoenix(
    delivery: Delivery, spec: dict[str, Any], url: str, headers: dict[str, str], secrets: dict[str, str]
) -> Outbound:
    span = delivery.span_id if delivery.rule.level == "span" else (delivery.root_span_id or delivery.span_id)
    session = delivery.session_id if delivery.rule.level == "session" else None
    if not span and not session and not (delivery.source == "job" and delivery.trace_id):
        raise Skip("the score has no span to annotate")
    result: dict[str, Any] = {}
    if delivery.score is not None:
        result["score"] = delivery.score
    label = delivery.label if delivery.label is not None else (
        None if delivery.passed is None else ("pass" if delivery.passed else "fail")
    )  # fmt: skip
    if label is not None:
        result["label"] = str(label)[:200]
    if (reason := _reason(delivery)) is not None:
        result["explanation"] = reason
    if "score" not in result and "label" not in result:
        raise Skip("the result has no score, passed or label")
    if spec.get("api_key"):
        headers["Authorization"] = f"Bearer {_fill(spec['api_key'], secrets)}"
    if session:
        route, subject = "session_annotations", {"session_id": session}
    elif span:
        route, subject = "span_annotations", {"span_id": span}
    else:  # a job's row naming a trace only
        route, subject = "trace_annotations", {"trace_id": delivery.trace_id}
    annotation = {
        **subject,
        "name": _name(spec, delivery),
        "annotator_kind": "CODE",
        "result": result,
        "metadata": _metadata(delivery),
        "identifier": delivery.key,
    }
    return Outbound(f"{url}/v1/{route}?sync=true", headers, {"data": [annotation]})


def _langfuse(
    delivery: Delivery, spec: dict[str, Any], url: str, headers: dict[str, str], secrets: dict[str, str]
) -> Outbound:
    value: float | str
    if delivery.score is not None:
        value, kind = delivery.score, "NUMERIC"
    elif delivery.passed is not None:
        value, kind = (1 if delivery.passed else 0), "BOOLEAN"
    elif delivery.label is not None:
        value, kind = str(delivery.label)[:200], "CATEGORICAL"
    else:
        raise Skip("the result has no score, passed or label")
    pair = f"{_fill(spec['public_key'], secrets)}:{_fill(spec['secret_key'], secrets)}"
    headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    subject = (
        {"sessionId": delivery.session_id}
        if delivery.rule.level == "session" and delivery.session_id
        else {"traceId": delivery.trace_id}
    )
    body: dict[str, Any] = {
        "id": delivery.key,
        **subject,
        "name": _name(spec, delivery),
        "value": value,
        "dataType": kind,
        "metadata": _metadata(delivery),
    }
    if delivery.rule.level == "span" and delivery.span_id:
        body["observationId"] = delivery.span_id
    if (reason := _reason(delivery)) is not None:
        body["comment"] = reason
    return Outbound(f"{url}/api/public/scores", headers, body)


def _mlflow(
    delivery: Delivery, spec: dict[str, Any], url: str, headers: dict[str, str], secrets: dict[str, str]
) -> Outbound:
    value: float | bool | str
    if delivery.score is not None:
        value = delivery.score
    elif delivery.passed is not None:
        value = delivery.passed
    elif delivery.label is not None:
        value = str(delivery.label)[:200]
    else:
        raise Skip("the result has no score, passed or label")
    if spec.get("api_key"):
        headers["Authorization"] = f"Bearer {_fill(spec['api_key'], secrets)}"
    trace = f"tr-{delivery.trace_id}"
    metadata = {k: str(v) for k, v in _metadata(delivery).items() if v is not None}
    assessment: dict[str, Any] = {
        "assessment_name": _name(spec, delivery),
        "trace_id": trace,
        "source": {"source_type": "CODE", "source_id": "evaluator-host"},
        "feedback": {"value": value},
        "metadata": {**metadata, KEY_METADATA: delivery.key},
    }
    if delivery.rule.level == "span" and delivery.span_id:
        assessment["span_id"] = delivery.span_id
    if (reason := _reason(delivery)) is not None:
        assessment["rationale"] = reason
    base = f"{url}/api/3.0/mlflow/traces/{trace}"
    return Outbound(f"{base}/assessments", headers, {"assessment": assessment}, recorded=base)


def _otlp(delivery: Delivery, spec: dict[str, Any], url: str, headers: dict[str, str]) -> Outbound:
    def pairs(values: dict[str, Any]) -> list[KeyValue]:
        out = []
        for key, value in values.items():
            item = KeyValue(key=key)
            if isinstance(value, bool):
                item.value.bool_value = value
            elif isinstance(value, int):
                item.value.int_value = value
            elif isinstance(value, float):
                item.value.double_value = value
            else:
                item.value.string_value = str(value)
            out.append(item)
        return out

    rule = {"id": delivery.rule_id, "name": _name(spec, delivery), "evaluator_id": delivery.evaluator_id}
    result = {**(delivery.result or {}), "status": delivery.status, "score": delivery.score,
              "passed": delivery.passed, "label": delivery.label, "revision": delivery.revision}  # fmt: skip
    attributes = evaluation_attributes(rule, result)
    parent = delivery.span_id if delivery.rule.level == "span" else (delivery.root_span_id or delivery.span_id)
    end = time.time_ns()
    span = Span(
        trace_id=bytes.fromhex(delivery.trace_id),
        span_id=hashlib.sha256(delivery.key.encode()).digest()[:8],
        parent_span_id=bytes.fromhex(parent) if parent else b"",
        name="evaluation " + str(attributes["gen_ai.evaluation.name"]),
        kind=Span.SpanKind.SPAN_KIND_INTERNAL,
        start_time_unix_nano=end,
        end_time_unix_nano=end,
        attributes=pairs({**attributes, MARKER: True}),
    )
    event = span.events.add(name=EVENT_NAME, time_unix_nano=end)
    event.attributes.extend(
        pairs({k: v for k, v in attributes.items() if k.startswith("gen_ai.") or k == "error.type"})
    )
    if "error.type" in attributes:
        span.status.CopyFrom(Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=str(attributes["error.type"])))
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(pairs({"service.name": "evaluator-host", MARKER: True}))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "evaluator_host.online"
    scope_spans.spans.append(span)
    headers["Content-Type"] = "application/x-protobuf"
    return Outbound(traces_url(url), headers, {}, content=request.SerializeToString())
