"""Why a rule does not score a trace: the reason routing stores for ``not_matched`` and ``sampled_out``.

Contract (docs/online.md, "Why wasn't my trace scored?"):

* :func:`first_failure` — the first condition of a rule's filter, in the order
  :func:`~evaluator_host.online.deciding.router.matches` checks them (``service_name``, ``span_name``, then
  each attribute condition), that does not hold of a span, as one short sentence naming what the
  span has and what the rule wants — e.g.
  ``service_name is "billing", not "chat-api"``; None when every condition holds.
* :func:`why_not` — for a (trace, rule) that :func:`~evaluator_host.online.deciding.router.decide` gave no
  target: ``("sampled_out", …)`` with the pair's hash and the rate, or ``("not_matched", …)`` naming the
  first failed condition of the span that got furthest through the filter (ties: the first in start
  order), which span that was and how many there are; a trace of evaluation traffic only, or with
  no span, says so. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.online.scores import SpanRef, TraceRef

__all__ = ["MAX_REASON", "first_failure", "same", "sample_point", "why_not"]

MAX_REASON = 500  # characters of a stored reason
_VALUE = 80  # characters of one quoted value


def _q(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _VALUE else text[: _VALUE - 1] + "…"


def same(value: Any, wanted: Any) -> bool:
    """An attribute's ``equals``: the same JSON value, a bool never equal to a number."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value is wanted
    return bool(value == wanted)


def _failures(flt: dict[str, Any], span: SpanRef) -> tuple[int, str | None]:
    """(conditions that held before the first that failed, that failure's sentence or None)."""
    held = 0
    for key, have in (("service_name", span.service_name), ("span_name", span.name)):
        want = flt.get(key)
        if want is None:
            continue
        if have != want:
            return held, f"{key} is {'absent' if have is None else _q(have)}, not {_q(want)}"
        held += 1
    for cond in flt.get("attributes") or ():
        attrs, key = span.attributes, cond["key"]
        if cond.get("exists") is not None:
            if (key in attrs) != bool(cond["exists"]):
                said = f"present ({_q(attrs[key])})" if key in attrs else "absent"
                return held, f"attribute {key} is {said}, wanted {'present' if cond['exists'] else 'absent'}"
        elif key not in attrs:
            return held, f"attribute {key} is absent, not {_q(cond.get('equals'))}"
        elif not same(attrs[key], cond.get("equals")):
            return held, f"attribute {key} is {_q(attrs[key])}, not {_q(cond.get('equals'))}"
        held += 1
    return held, None


def first_failure(flt: dict[str, Any], span: SpanRef) -> str | None:
    """The first condition of ``flt`` that fails for ``span`` (see the module docstring), or None."""
    return _failures(flt, span)[1]


def sample_point(rule_id: str, trace_id: str) -> float:
    """Where the pair falls in [0, 1): sampled when below the rule's rate (see ``router.sampled``)."""
    digest = hashlib.sha256(f"{rule_id}:{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def why_not(trace: TraceRef, rule: RuleRecord) -> tuple[str, str]:
    """The decision and reason of a (trace, rule) routing gave no target (see the module docstring)."""
    point = sample_point(rule.id, trace.trace_id)
    sampled_per_trace = rule.level != "session"  # a session-level rule samples sessions, when one is joined
    if sampled_per_trace and (rule.sampling_rate <= 0.0 or (rule.sampling_rate < 1.0 and point >= rule.sampling_rate)):
        return "sampled_out", f"sampling_rate {rule.sampling_rate:g}: this trace falls at {point:.3f}, not below it"
    spans = [s for s in trace.spans if not s.evaluation]
    if not spans:
        if trace.spans:
            return "not_matched", f"every span of the trace is evaluation traffic ({MARKER}=true)"
        return "not_matched", "the trace has no spans"
    best: tuple[int, str, SpanRef] | None = None
    for span in spans:
        held, failure = _failures(rule.filter, span)
        if failure is None:  # decide() would have taken it: nothing to explain
            continue
        if best is None or held > best[0]:
            best = (held, failure, span)
    if best is None:
        if not sampled_per_trace:  # the filter holds, yet the trace joined no session of this rule
            key = (rule.target or {}).get("session_key") or "session.id, gen_ai.conversation.id or langfuse.session.id"
            return "not_matched", f"no session id under {key} on the trace's spans, or its session was sampled out"
        return "not_matched", "no span matches the rule's filter"
    _, failure, span = best
    where = f"span {_q(span.name)} {span.span_id}" + (f", the closest of {len(spans)} spans" if len(spans) > 1 else "")
    return "not_matched", f"{failure} ({where})"[:MAX_REASON]
