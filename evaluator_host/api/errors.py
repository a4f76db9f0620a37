"""Error handlers: where raised errors become HTTP answers (the body-limit middleware in
``limits.py`` writes its own 413, in the same envelope).

Every error body is ``{"error": {"type", "message", "line", "column", ...}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from evaluator_host.api.fields import body_model, unknown_field
from evaluator_host.errors import EvaluatorHostError

__all__ = ["host_error_response", "install"]

log = logging.getLogger(__name__)


def _body(type_name: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": type_name, "message": message, "line": None, "column": None, **extra}}


def _host_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EvaluatorHostError)
    return host_error_response(exc)


def host_error_response(exc: EvaluatorHostError) -> JSONResponse:
    """The answer to one of our errors: its class's ``status``, the error envelope with its ``fields()``,
    and ``Retry-After`` when it says when to retry (``WWW-Authenticate`` on a 401)."""
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(
        _body(exc.type_name, exc.message, **exc.fields()), status_code=exc.status, headers=headers or None
    )


_EXCERPT = 30  # characters shown either side of a JSON syntax error


def _json_syntax_error(exc: RequestValidationError) -> JSONResponse | None:
    """A body that is not JSON: the decoder's reason, with line, column and an excerpt marking the spot."""
    errors = exc.errors()
    if len(errors) != 1 or errors[0].get("type") != "json_invalid" or not isinstance(exc.body, str | bytes):
        return None
    doc = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else exc.body
    loc = errors[0].get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
    line = doc.count("\n", 0, pos) + 1
    start = doc.rfind("\n", 0, pos) + 1
    column = pos - start + 1
    end = doc.find("\n", pos)
    text = doc[start : len(doc) if end < 0 else end]
    left = max(0, column - 1 - _EXCERPT)
    excerpt = (
        ("…" if left else "") + text[left : column - 1 + _EXCERPT] + ("…" if len(text) > column - 1 + _EXCERPT else "")
    )
    caret = " " * (column - 1 - left + (1 if left else 0)) + "^"
    reason = (errors[0].get("ctx") or {}).get("error", "JSON decode error")
    message = f"the body is not valid JSON: {reason} at line {line}, column {column}"
    return JSONResponse(
        _body(
            "ValidationError", message, line=line, column=column, excerpt=f"{excerpt}\n{caret}", details=_details(exc)
        ),
        status_code=422,
    )


def _not_json(request: Request, exc: RequestValidationError) -> JSONResponse | None:
    """A JSON route's body sent without a JSON content type (the framework then never parses it, and
    pydantic's "Input should be a valid dictionary" names no cause): say what to send."""
    content_type = request.headers.get("content-type", "")
    main = content_type.partition(";")[0].strip().lower()
    if main == "application/json" or (main.startswith("application/") and main.endswith("+json")):
        return None
    if not any(tuple(e.get("loc", ())) == ("body",) for e in exc.errors()):
        return None
    sent = f"this request's Content-Type is {content_type!r}" if content_type else "this request has no Content-Type"
    message = f"send JSON (Content-Type: application/json): {sent}"
    return JSONResponse(_body("ValidationError", message, details=_details(exc)), status_code=422)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    syntax = _json_syntax_error(exc) or _not_json(request, exc)
    if syntax is not None:
        return syntax
    details = _details(exc, body_model(request.scope.get("route")))
    problems = []
    for err in details:
        where = ".".join(str(p) for p in err["loc"] if p != "body")
        problems.append(f"{where or 'body'}: {err['msg']}")
    return JSONResponse(_body("ValidationError", "; ".join(problems), details=details), status_code=422)


def _details(exc: RequestValidationError, model: type[BaseModel] | None = None) -> list[dict[str, Any]]:
    """Each problem as ``{loc, msg, type}``; an unknown field (``extra_forbidden``) also names the
    fields accepted there and the closest one (see :func:`~evaluator_host.api.fields.unknown_field`)."""
    out: list[dict[str, Any]] = []
    for e in exc.errors():
        loc = list(e.get("loc", ()))
        detail: dict[str, Any] = {"loc": loc, "msg": e.get("msg"), "type": e.get("type")}
        if e.get("type") == "extra_forbidden" and "accepted" in e:  # a route's own check (PATCH settings)
            detail.update({k: e[k] for k in ("msg", "field", "accepted", "did_you_mean")})
        elif e.get("type") == "extra_forbidden" and model is not None:
            detail.update(unknown_field(model, loc))
        out.append(detail)
    return out


def _not_utf8(exc: UnicodeDecodeError) -> JSONResponse:
    """A JSON body that is not UTF-8: where the first bad byte is (the framework only says "400")."""
    data = exc.object if isinstance(exc.object, bytes) else b""
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    message = (
        f"the body is not valid JSON: it is not UTF-8 (byte 0x{data[exc.start]:02x} at line {line}, column {column})"
        if exc.start < len(data)
        else "the body is not valid JSON: it is not UTF-8"
    )
    return JSONResponse(_body("ValidationError", message, line=line, column=column, details=[]), status_code=422)


def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        return _not_utf8(exc.__cause__)
    names = {400: "BadRequest", 401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}
    return JSONResponse(
        _body(names.get(exc.status_code, "HTTPError"), str(exc.detail)),
        status_code=exc.status_code,
        headers=exc.headers,
    )


def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    """A defect of ours: still the error envelope (never a bare-text body), and the traceback in the log."""
    log.error("unhandled error", exc_info=exc)
    return JSONResponse(_body("InternalError", "an internal error occurred; it was logged"), status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(EvaluatorHostError, _host_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
