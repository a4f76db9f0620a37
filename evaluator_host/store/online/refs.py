"""What routing reads of the online tables: spans and traces as references, a queue row's target id, and the
key helper. No I/O but the statement built by :func:`keyed`.

Contract: :class:`SpanRef` is one span as routing sees it (its attributes and resource decoded from its
body on first use; ``""`` as body: not read, no attributes); :class:`TraceRef` a ready trace, its spans
in start order; :func:`target_id` a (rule, span)'s queue key; :func:`keyed` the portable two-column ``IN``;
:func:`session_keys` the attribute keys a routing pass looks for sessions under (:data:`DEFAULT_KEYS` and
the session-level rules' own keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import ColumnElement, and_, false, func, or_

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord

__all__ = ["DEFAULT_KEYS", "SpanRef", "TraceRef", "keyed", "session_keys", "target_id", "targets_of", "waiting_of"]

_DECODE = msgspec.json.Decoder().decode
_PLAIN_KEY = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]+")  # printable ASCII but '"' and '\\'
_QUOTED: dict[str, str] = {}  # key -> its JSON text when plain, "" when not (SpanRef.may_have)

DEFAULT_KEYS = ("session.id", "gen_ai.conversation.id", "langfuse.session.id")  # a session's, by default


def keyed(first: Any, second: Any, keys: Iterable[tuple[str, str]]) -> ColumnElement[bool]:
    """``(first, second) IN keys`` as ``first = a AND second IN (…)`` per distinct ``a``: SQLite's
    planner uses the two-column primary key for this form, and scans the table for a row-value ``IN``."""
    by: dict[str, list[str]] = {}
    for a, b in keys:
        by.setdefault(a, []).append(b)
    return or_(false(), *(and_(first == a, second.in_(bs)) for a, bs in by.items()))


def targets_of(target: Any, base: Any) -> ColumnElement[bool]:
    """``target`` (a score row's target id) in the primary key's range of ``base`` (a trace id, or a target id) and
    its revisions' (``<base>@r<n>``): ``[base, base + "@s")``. A trace id is 32 hex digits, so no other trace's
    target sorts in it; at trace level a span target ``<trace>/<span>`` does, so a caller that must tell them apart
    adds its exact predicate."""
    return and_(target >= base, target < base + "@s")


def waiting_of(rule_id: str) -> ColumnElement[bool]:
    """The rule's ``online_scores`` rows queued or running, read by the queue's ``state`` index: the backlog is
    bounded (``online_backlog_max``), a rule's rows are not. With ``rule_id = ?`` in the statement SQLite read every
    row of the rule by its (rule, scored_at) index — 41 ms a call at 100,000 rows, each 3 s the Online screen is
    open — so the rule is compared through ``coalesce``, which no index holds (PostgreSQL too: its plan is then the
    backlog's, whatever its statistics say of the rule)."""
    s = OnlineScoreRow
    return and_(s.state.in_(("queued", "running")), func.coalesce(s.rule_id, "") == rule_id)


def target_id(rule: RuleRecord, trace_id: str, span_id: str | None) -> str:
    """The target id of a (rule, evaluated span) of ``trace_id``: the trace id at trace level, else
    ``<trace id>/<span id>`` (span ids are unique within a trace only)."""
    if rule.level == "span" and span_id is not None:
        return f"{trace_id}/{span_id}"
    return trace_id


@dataclass
class SpanRef:
    """What routing reads of one span: its id, name, service name, start, and (lazily) attributes."""

    span_id: str
    name: str
    service_name: str | None
    start_ns: int
    body: str
    _attributes: dict[str, Any] | None = field(default=None, repr=False)
    _evaluation: bool | None = field(default=None, repr=False)  # known already (a trial's decoded spans)
    _resource: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def attributes(self) -> dict[str, Any]:
        """The span's attributes, flat by dotted key (decoded on first use)."""
        if self._attributes is None:
            self._parse()
        return self._attributes or {}

    @property
    def resource(self) -> dict[str, Any]:
        """The span's resource attributes (decoded on first use; ``{}`` when the body was not read)."""
        if self._resource is None:
            self._parse()
        return self._resource or {}

    def _parse(self) -> None:
        """The body's attributes and resource, from ONE parse of it (routing reads both of most spans)."""
        data = _loads(self.body) if self.body else {}
        self._attributes = dict(data.get("attributes") or {})
        self._resource = dict(data.get("resource") or {})

    @property
    def evaluation(self) -> bool:
        """Whether the span is evaluation traffic (the service's own exports, its judges' calls): the
        attribute ``evaluator_host.evaluation`` true (or ``"true"``, as ``OTEL_RESOURCE_ATTRIBUTES`` sets it)
        on the span or its resource. Such a span is never routed to a rule."""
        if self._evaluation is None:  # once a span (routing asks it of every span for every session key)
            # the common case costs a substring search, not a parse
            marked = MARKER in self.body and any(
                part.get(MARKER) in (True, "true") for part in (self.attributes, self.resource)
            )
            self._evaluation = marked
        return self._evaluation

    def may_have(self, key: str) -> bool:
        """False only when neither the span's attributes nor its resource can hold ``key``, known without
        reading the body: its attributes not read yet, ``key`` plain ASCII (no quote, backslash or control
        character: every JSON writer writes it as it is) and its quoted text nowhere in the body."""
        if self._attributes is not None:
            return True
        quoted = _QUOTED.get(key)
        if quoted is None:
            quoted = f'"{key}"' if _PLAIN_KEY.fullmatch(key) else ""
            if len(_QUOTED) < 1024:  # the session keys of the rules there are: a few
                _QUOTED[key] = quoted
        return not quoted or quoted in self.body


def _loads(body: str) -> dict[str, Any]:
    """A stored body as JSON: msgspec (~3x the standard library's speed), or the standard library for what
    msgspec refuses (the non-finite numbers ``NaN``/``Infinity`` its writer may have let through)."""
    try:
        data = _DECODE(body)
    except msgspec.DecodeError:
        data = json.loads(body)
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class TraceRef:
    """A ready trace as routing sees it (its spans in start order)."""

    workspace_id: str
    trace_id: str
    root_span_id: str | None
    spans: list[SpanRef]
    last_span_at: datetime | None = None


def session_keys(rules: dict[str, list[RuleRecord]]) -> tuple[str, ...]:
    """The attribute keys routing looks for sessions under: the defaults and the rules' own."""
    custom = {
        str((r.target or {})["session_key"]) for rs in rules.values() for r in rs if (r.target or {}).get("session_key")
    }
    return (*DEFAULT_KEYS, *sorted(custom))
