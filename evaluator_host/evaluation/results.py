"""What the harness sends back becomes a result: :func:`to_result` normalizes one outcome, :func:`redact`
takes secret values out of it first.

A failure's message and traceback lose any ANSI colour codes (a library that colours its own errors,
nltk's ``LookupError``, reads as noise in JSON). A failure whose message does not name its cause
gets a hint: a network call in a sandbox without network (DNS failures and refused connections,
Python and Node), a package that imports ``pkg_resources`` under a setuptools that no longer ships
it, data a library tries to download at run time (nltk). A success is normalized by
:mod:`evaluator_host.evaluation.outcomes.normalize` with the interface's rules and the definition's
threshold, and carries the egress proxy's record of the connections it made.
"""

from __future__ import annotations

import re
from typing import Any

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.outcomes.normalize import normalize
from evaluator_host.evaluation.prepared import Prepared
from evaluator_host.sandbox.base import RawOutcome, error_info
from evaluator_host.tenancy.redaction import Redactor

__all__ = ["DATA_HINT", "NETWORK_HINT", "PKG_RESOURCES_HINT", "redact", "strip_ansi", "to_result"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

# What a network call reports inside the sandbox (Python's socket / urllib / requests, Node's dns / fetch).
_NO_NETWORK = (
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "getaddrinfo EAI_AGAIN",
    "getaddrinfo ENOTFOUND",
    "connect ENETUNREACH",
    "connect ECONNREFUSED",
    "Connection refused",
    "fetch failed",
)
NETWORK_HINT = (
    "evaluators run without network access (no DNS, no connections) unless they declare `network` "
    "(host:port destinations their workspace's operator allows, reached through the egress proxy): "
    "declare it, or fetch what the code needs before the call and pass it in inputs"
)

# setuptools 81 removed pkg_resources; packages pinned to old releases still import it.
_NO_PKG_RESOURCES = ("No module named 'pkg_resources'",)
PKG_RESOURCES_HINT = (
    "a package imports pkg_resources, which setuptools no longer ships from version 81: add setuptools "
    'below 81 to the packages, pinned like any other (e.g. "setuptools": "80.9.0")'
)
# A library that looks for data files it would download (nltk's "Resource punkt not found").
_NO_DATA = ("nltk.download(", "Searched in:\n")
DATA_HINT = (
    "the sandbox cannot download data at run time (no network, read-only files outside the work dir): "
    "ship the data in a package pinned like any other, or use a function that needs none "
    "(docs/api.md, Runtimes: Data files)"
)


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves, OSC titles)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def _clean(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """``error`` with ANSI escapes taken out of its message and traceback."""
    if not error:
        return error
    return {k: strip_ansi(v) if k in ("message", "traceback") and isinstance(v, str) else v for k, v in error.items()}


def _hints(error: dict[str, Any] | None) -> list[str]:
    """Hints for failures whose cause the message does not name (a network call in the sandbox, a
    missing ``pkg_resources``, data a library would download)."""
    if not error:
        return []
    text = f"{error.get('message', '')}\n{str(error.get('traceback', ''))[-2000:]}"
    found = [(_NO_NETWORK, NETWORK_HINT), (_NO_PKG_RESOURCES, PKG_RESOURCES_HINT), (_NO_DATA, DATA_HINT)]
    return [hint for markers, hint in found if any(marker in text for marker in markers)]


def to_result(raw: RawOutcome, prepared: Prepared, runtime: dict[str, Any]) -> EvaluationResult:
    """Normalize one harness outcome into an :class:`EvaluationResult` (the proxy's record of its
    connections kept host-side too: :attr:`EvaluationResult.proxy_log`)."""
    result = _result(raw, prepared, runtime)
    if raw.egress:
        result._proxy_log = list(raw.egress)  # noqa: SLF001 - set where it is made, from the host's record
    return result


def _result(raw: RawOutcome, prepared: Prepared, runtime: dict[str, Any]) -> EvaluationResult:
    base: dict[str, Any] = {
        "stdout": raw.stdout,
        "stderr": raw.stderr,
        "truncated": raw.truncated,
        "duration_ms": raw.duration_ms,
        "interface": prepared.interface,
        "runtime": runtime,
    }
    refused = [e for e in raw.egress if str(e.get("status", "")).startswith("refused")]
    notes = [f"the egress proxy refused {len(refused)} connection(s): see details.egress"] if refused else []
    if raw.status != "ok":
        details = {"egress": raw.egress} if raw.egress else {}
        error = _clean(raw.error)
        hints = notes + [h for h in _hints(error) if h != NETWORK_HINT] if prepared.network else _hints(error)
        return EvaluationResult(status=raw.status, error=error, warnings=hints, details=details, **base)
    norm = normalize(raw.value, interface=prepared.interface, threshold=prepared.settings.threshold)
    if norm.invalid is not None:
        return EvaluationResult(status="invalid_result", error=error_info("InvalidResult", norm.invalid), **base)
    details = norm.details
    if raw.egress:  # the connections it made through the egress proxy (the user's own "egress" key wins)
        details = {**details, "egress": details.get("egress", raw.egress)}
    return EvaluationResult(
        status="ok",
        score=norm.score,
        passed=norm.passed,
        outputs=norm.outputs,
        details=details,
        reason=norm.reason,
        label=norm.label,
        warnings=norm.warnings + notes,
        **base,
    )


def redact(raw: RawOutcome, redactor: Redactor) -> None:
    """Replace secret values in everything of ``raw`` user code could have put them in."""
    raw.stdout = redactor.text(raw.stdout)
    raw.stderr = redactor.text(raw.stderr)
    raw.error = redactor.value(raw.error)
    raw.value = redactor.value(raw.value)
