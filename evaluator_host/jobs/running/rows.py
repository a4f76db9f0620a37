"""A job row's stored result without building an :class:`EvaluationResult`: the hot path of batch jobs.

Contract: ``stored_row(raw, prepared, runtime, cap)`` returns a :class:`StoredRow` whose ``text``
decodes to exactly what ``stored_form(to_result(raw, prepared, runtime), cap)`` decodes to (short
for a bare row: ``stored_form.BARE_KEYS``), with the keys in the same order (tests prove it), and
whose ``status``/``score``/``passed``/``outputs``/``label`` are the result's (what the job's
aggregate needs). A plain ok outcome costs one :func:`normalize` and one msgspec encode; anything
else (errors, invalid results, results near the size cap, values msgspec can't encode) takes the
model path, so both paths always agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.outcomes.normalize import normalize
from evaluator_host.evaluation.path import Prepared, to_result
from evaluator_host.jobs.stored_form import BARE_DURATION, SHARED_FIELDS, stored_form
from evaluator_host.sandbox.base import PlainOutcome, RawOutcome

__all__ = ["STORED_KEYS", "StoredChunk", "StoredRow", "stored_chunk", "stored_row", "stored_rows"]

# The stored form's keys, in the model's order (what ``model_dump_json(exclude=SHARED_FIELDS)`` writes).
STORED_KEYS = tuple(name for name in EvaluationResult.model_fields if name not in SHARED_FIELDS)
_LEAN_KEYS = (
    "status score passed outputs details reason label error warnings stdout stderr truncated duration_ms capabilities"
).split()
_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class StoredRow:
    """One row as committed: its status, stored JSON, and what the aggregate counts."""

    status: str
    text: str
    score: float | None = None
    passed: bool | None = None
    outputs: dict[str, float] | None = None
    label: str | None = None


# A bare score (bool or number) with nothing printed: the stored text (short: see stored_form.BARE_KEYS)
# around the three values that vary.
_SCORE_HEAD = '{"status":"ok","score":'
_PASSED = {True: ',"passed":true', False: ',"passed":false', None: ',"passed":null'}
_repr = float.__repr__  # a finite float's repr is JSON
_END = "}"
# A bool's row: the text before its duration, by value (a bool's score is 1 or 0, and it passes as it is).
_BOOL_HEAD = {value: f"{_SCORE_HEAD}{float(value)!r}{_PASSED[value]}{BARE_DURATION}" for value in (True, False)}


def _bare_score(raw: RawOutcome, prepared: Prepared) -> StoredRow | None:
    """The row of a bool or in-range number returned with no output, else None (the general path)."""
    value = raw.value
    kind = type(value)
    if kind is bool:
        score, passed = (1.0 if value else 0.0), value
    elif kind is float or kind is int:
        try:
            score = float(value)
        except OverflowError:
            return None
        if not (0.0 <= score <= 1.0 or (prepared.interface != "evaluate" and math.isfinite(score))):
            return None  # non-finite, or out of [0, 1] for evaluate (a warning): the general path
        threshold = prepared.settings.threshold
        passed = None if threshold is None else score >= threshold
    else:
        return None
    if raw.stdout or raw.stderr or raw.truncated:
        return None
    duration = float(raw.duration_ms)
    if not math.isfinite(duration):
        return None
    text = _SCORE_HEAD + _repr(score) + _PASSED[passed] + BARE_DURATION + _repr(duration) + _END
    return StoredRow("ok", text, score, passed, None, None)


def stored_row(raw: RawOutcome, prepared: Prepared, runtime: dict[str, Any], cap: int | None) -> StoredRow:
    """The stored row of ``raw`` (see the module's contract)."""
    if raw.status == "ok" and not raw.egress:  # an egress log (details.egress) takes the model path
        bare = _bare_score(raw, prepared)
        if bare is not None and (cap is None or len(bare.text) <= cap):
            return bare
        norm = normalize(raw.value, interface=prepared.interface, threshold=prepared.settings.threshold)
        if norm.invalid is None:
            duration = float(raw.duration_ms)
            lean: dict[str, Any] = {"status": "ok", "score": norm.score, "passed": norm.passed, "duration_ms": duration}
            if (
                norm.outputs
                or norm.details
                or norm.warnings
                or norm.reason is not None
                or norm.label is not None
                or (raw.stdout or raw.stderr or raw.truncated)
            ):  # not bare: every field (see stored_form.BARE_KEYS)
                lean = {
                    "status": "ok",
                    "score": norm.score,
                    "passed": norm.passed,
                    "outputs": norm.outputs,
                    "details": norm.details,
                    "reason": norm.reason,
                    "label": norm.label,
                    "error": None,
                    "warnings": norm.warnings,
                    "stdout": raw.stdout,
                    "stderr": raw.stderr,
                    "truncated": raw.truncated,
                    "duration_ms": duration,
                    "capabilities": None,
                }
            try:
                data = _encode(lean)
            except (msgspec.EncodeError, TypeError, ValueError, OverflowError):
                data = None  # e.g. a lone surrogate in a string: the model path says what it says
            if data is not None and (cap is None or len(data) <= cap):
                return StoredRow("ok", data.decode(), norm.score, norm.passed, norm.outputs, norm.label)
    result = to_result(raw, prepared, runtime)
    return StoredRow(result.status, stored_form(result, cap), result.score, result.passed, result.outputs, result.label)


def stored_rows(
    raws: list[RawOutcome], prepared: Prepared, runtime: dict[str, Any], cap: int | None
) -> list[StoredRow]:
    """``[stored_row(raw, prepared, runtime, cap) for raw in raws]``, with the commonest row of a job (a
    bool returned in a plain ok outcome) written inline: the same text, a fraction of the calls."""
    rows: list[StoredRow] = []
    append = rows.append
    for raw in raws:
        value = raw.value
        if type(value) is bool and raw.status == "ok" and not (raw.stdout or raw.stderr or raw.truncated or raw.egress):
            duration = float(raw.duration_ms)
            text = _BOOL_HEAD[value] + _repr(duration) + _END
            if math.isfinite(duration) and (cap is None or len(text) <= cap):
                append(StoredRow("ok", text, 1.0 if value else 0.0, value))
                continue
        append(stored_row(raw, prepared, runtime, cap))
    return rows


@dataclass(slots=True)
class StoredChunk:
    """A chunk's rows as committed, column by column: each row's ``statuses`` and ``texts`` (in order),
    and what the aggregate counts: ``scored``, every row but the bare bools (as :class:`StoredRow`),
    and ``trues``/``falses``, how many bare bools (score 1 or 0, passed as they are) the chunk holds."""

    statuses: list[str]
    texts: list[str]
    scored: list[StoredRow]
    trues: int = 0
    falses: int = 0

    def failed(self) -> int:
        """Rows whose status is not ``ok``."""
        return len(self.statuses) - self.statuses.count("ok")


def stored_chunk(raws: list[RawOutcome], prepared: Prepared, runtime: dict[str, Any], cap: int | None) -> StoredChunk:
    """The rows of ``raws`` as :func:`stored_rows` writes them (the same statuses and texts, in order),
    without an object per row for the commonest row of a job: a bool a ``results`` frame answered
    (a :class:`PlainOutcome` with nothing printed beside it)."""
    statuses: list[str] = []
    texts: list[str] = []
    scored: list[StoredRow] = []
    trues = falses = 0
    status, text_of = statuses.append, texts.append
    plain, head = PlainOutcome, _BOOL_HEAD
    for raw in raws:
        value = raw.value
        if (value is True or value is False) and type(raw) is plain and not (raw.stderr or raw.egress):
            text = head[value] + _repr(raw.duration_ms) + _END  # a plain outcome's duration is a finite float
            if cap is None or len(text) <= cap:
                status("ok")
                text_of(text)
                if value:
                    trues += 1
                else:
                    falses += 1
                continue
        row = stored_row(raw, prepared, runtime, cap)
        status(row.status)
        text_of(row.text)
        scored.append(row)
    return StoredChunk(statuses, texts, scored, trues, falses)


if tuple(_LEAN_KEYS) != STORED_KEYS:  # pragma: no cover - a new EvaluationResult field must be added above
    raise RuntimeError(f"jobs/running/rows.py writes {_LEAN_KEYS}, the model stores {STORED_KEYS}")
