"""What the harness sends back becomes a result: :func:`to_result` normalizes one outcome, :func:`redact`
takes secret values out of it first.

A failure whose message does not name its cause gets a hint (a network call in a sandbox without
network); a success is normalized by :mod:`evaluator_host.evaluation.normalize` with the
interface's rules and the definition's threshold, and carries the egress proxy's record of the
connections it made.
"""

from __future__ import annotations

from typing import Any

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.normalize import normalize
from evaluator_host.evaluation.prepared import Prepared
from evaluator_host.sandbox.base import RawOutcome, error_info
from evaluator_host.tenancy.redaction import Redactor

__all__ = ["NETWORK_HINT", "redact", "to_result"]

# What a network call reports inside the sandbox (Python's socket / urllib / requests, Node's dns / fetch).
_NO_NETWORK = (
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "getaddrinfo EAI_AGAIN",
    "getaddrinfo ENOTFOUND",
    "connect ENETUNREACH",
    "fetch failed",
)
NETWORK_HINT = (
    "evaluators run without network access (no DNS, no connections) unless they declare `network` "
    "(host:port destinations their workspace's operator allows, reached through the egress proxy): "
    "declare it, or fetch what the code needs before the call and pass it in inputs"
)


def _hints(error: dict[str, Any] | None) -> list[str]:
    """Hints for failures whose cause the message does not name (a network call in the sandbox)."""
    if not error:
        return []
    text = f"{error.get('message', '')}\n{str(error.get('traceback', ''))[-2000:]}"
    return [NETWORK_HINT] if any(marker in text for marker in _NO_NETWORK) else []


def to_result(raw: RawOutcome, prepared: Prepared, runtime: dict[str, Any]) -> EvaluationResult:
    """Normalize one harness outcome into an :class:`EvaluationResult`."""
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
        hints = notes if prepared.network else _hints(raw.error)
        return EvaluationResult(status=raw.status, error=raw.error, warnings=hints, details=details, **base)
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
