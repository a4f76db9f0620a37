"""The OTLP receiver's answers, in the request's encoding: :func:`answer` (``ExportTraceServiceResponse``, with
``partial_success`` when spans were rejected) and :func:`error_answer` (a refusal's ``google.rpc.Status``), for
OTLP/HTTP and gRPC alike (:mod:`~evaluator_host.online.receive.otlp` decodes the requests)."""

from __future__ import annotations

import json

from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from evaluator_host.online.receive.otlp import PROTOBUF, Decoded

__all__ = ["answer", "error_answer"]

_CODES = {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 503: 14}  # HTTP status -> google.rpc.Code


def answer(media: str, decoded: Decoded | None = None) -> bytes:
    """The ``ExportTraceServiceResponse`` (``partial_success`` when spans were rejected) in ``media``."""
    response = ExportTraceServiceResponse()
    if decoded is not None and decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = decoded.error_message
    if media == PROTOBUF:
        return bytes(response.SerializeToString())
    return json.dumps(json_format.MessageToDict(response), separators=(",", ":")).encode()


def error_answer(media: str, status: int, message: str, kind: str = "BadRequest", quota: str | None = None) -> bytes:
    """A refusal's body: OTLP's ``google.rpc.Status`` (protobuf, or its JSON — which also carries the
    service's usual ``{"error": {"type", "message"}}``, and the ``quota`` a 429 names, so API clients read
    it like any other error)."""
    code = _CODES.get(status, 2)
    if media == PROTOBUF:
        return bytes(Status(code=code, message=message).SerializeToString())
    error = {"type": kind, "message": message, "line": None, "column": None}
    if quota is not None:
        error["quota"] = quota
    return json.dumps({"code": code, "message": message, "error": error}, separators=(",", ":")).encode()
