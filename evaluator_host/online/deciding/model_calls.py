"""A rule's calls to its judges, read from the egress proxy's own record of each case's connections
(issue 51: ``model_calls_per_minute`` and the 429s the proxy sees).

Where the record comes from: every egress worker has a gate of its own (a unix socket on the host, bound
into its sandbox: ``sandbox/egress/proxy.py``) and the pool takes the gate's log after each of the
worker's replies, so each case's connections are those made while it ran; the record rides on the
case's result host-side (:attr:`~evaluator_host.evaluation.models.EvaluationResult.proxy_log`), apart
from anything the evaluator returns (its ``details.egress`` may be its own). The scorer runs one rule's
rows per call, so a case's connections are its rule's. Nothing here is something evaluator code can
write: it can only make (or not make) connections, and the proxy counts them.

* :func:`calls` — the case's connections the proxy let through (to its ``network`` hosts: any other is
  refused, and a refused one reached no judge). One request per connection where the proxy reads the
  request (plain ``http://``, forwarded with ``Connection: close``; a destination with ``headers``, whose
  TLS the proxy ends); an opaque ``CONNECT`` tunnel is one call however many requests its client sends
  on it (keep-alive): a budget counted per connection.
* :func:`saw_429` — the proxy saw a judge answer ``429`` during the case (``http_status``: plain HTTP, or
  TLS it ended; an opaque tunnel's answers are never read: the ``RateLimited`` exception is the
  evaluator's way to say so there).
* :func:`rate_refused` — the rows of a round refused for their judge's rate: ``RateLimited`` (the evaluator
  said so), or an ``error`` in a rule's round where the proxy saw a judge answer 429 — the evaluator (or its
  SDK, after its own retries) gave up on the rate limit. Round-wide, not row by row: rows of an async
  evaluator run together on one worker and share its gate, so the proxy cannot tell which of them a 429
  was for. The scorer puts them back in the queue: never ``failed`` for a rate limit. An error for another
  reason in such a round is tried again later (no attempt counted), and fails in a round without 429s.
"""

from __future__ import annotations

from typing import Any

from evaluator_host.evaluation.models import EvaluationResult

__all__ = ["RATE_LIMITED", "calls", "rate_refused", "rounds", "saw_429"]

RATE_LIMIT_STATUS = 429
RATE_LIMITED = "RateLimited"  # the error type of a result whose evaluator said its judge refused it (429)


def _through(entry: dict[str, Any]) -> bool:
    return entry.get("host") is not None and not str(entry.get("status", "")).startswith("refused")


def calls(result: EvaluationResult) -> int:
    """The connections of the case the proxy let through (see the module docstring)."""
    return sum(1 for entry in result.proxy_log if _through(entry))


def saw_429(result: EvaluationResult) -> bool:
    """Whether the proxy saw a judge answer 429 during the case."""
    return any(entry.get("http_status") == RATE_LIMIT_STATUS for entry in result.proxy_log)


def rate_refused(results: dict[tuple[str, str], EvaluationResult]) -> set[tuple[str, str]]:
    """The (rule, target) keys of a round's results refused for their judge's rate (see the module docstring)."""
    limited = {rule for (rule, _target), result in results.items() if saw_429(result)}
    return {
        key
        for key, result in results.items()
        if (result.error is not None and result.error.type == RATE_LIMITED)
        or (result.status == "error" and key[0] in limited)
    }


def rounds(results: dict[tuple[str, str], EvaluationResult]) -> list[tuple[str, int, int]]:
    """``(rule_id, rows, calls)`` of one scoring round's results keyed by (rule, target): what
    :func:`~evaluator_host.store.online.calls.record` stores (every row that ran counts, refused or not)."""
    by_rule: dict[str, list[int]] = {}
    for (rule, _target), result in results.items():
        counted = by_rule.setdefault(rule, [0, 0])
        counted[0] += 1
        counted[1] += calls(result)
    return [(rule, n, made) for rule, (n, made) in sorted(by_rule.items())]
