"""What the failed rows of a run have in common: the most common error type, its count, one example.

A job whose every row errored (``AllRowsErrored``) and a comparison whose every row errored on both
sides (``NothingCompared``) say this instead of a bare count: a user reads "ZeroDivisionError on 20 of
20 rows, e.g. row 0, line 3: division by zero" and knows where to look. :class:`ErrorTally` counts in
O(distinct types) memory (at most :data:`MAX_TYPES` types are told apart; the rest count as ``other``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evaluator_host.evaluation.models import EvaluationResult

__all__ = ["MAX_TYPES", "ErrorSummary", "ErrorTally", "errors_on_both"]

MAX_TYPES = 256  # distinct error types counted apart at most (an evaluator inventing one per row stays O(1))
_MESSAGE_CHARS = 500  # an example's message is cut to this


@dataclass(frozen=True)
class ErrorSummary:
    """``rows`` failed rows, of which ``count`` had the most common error ``type``; ``example_*`` is the
    first row of that type (its 0-based index, message and 1-based line in the code, or None)."""

    rows: int
    type: str
    count: int
    example_index: int
    example_message: str
    example_line: int | None

    def sentence(self) -> str:
        """``ZeroDivisionError on 20 of 20 rows (e.g. row 0, line 3: division by zero)``."""
        where = f"row {self.example_index}" + (f", line {self.example_line}" if self.example_line else "")
        return f"{self.type} on {self.count} of {self.rows} rows (e.g. {where}: {self.example_message})"

    def fields(self) -> dict[str, Any]:
        """The summary as an error answer's fields."""
        return {
            "most_common": {"type": self.type, "count": self.count},
            "example": {"index": self.example_index, "line": self.example_line, "message": self.example_message},
        }


class ErrorTally:
    """Failed rows fed one at a time (:meth:`add`); :meth:`summary` is what they have in common."""

    def __init__(self) -> None:
        self.rows = 0
        self._counts: dict[str, int] = {}
        self._examples: dict[str, tuple[int, str, int | None]] = {}

    def add(self, index: int, type_name: str, message: str, line: int | None) -> None:
        """Account for the failed row ``index`` (its error's type, message and line)."""
        self.rows += 1
        if type_name not in self._counts and len(self._counts) >= MAX_TYPES:
            type_name = "other"
        self._counts[type_name] = self._counts.get(type_name, 0) + 1
        if type_name not in self._examples:
            self._examples[type_name] = (index, message[:_MESSAGE_CHARS], line)

    def summary(self) -> ErrorSummary | None:
        """The most common type (ties: the first seen), or None when no row failed."""
        if not self._counts:
            return None
        common = max(self._counts, key=lambda name: self._counts[name])  # max keeps the first of equals
        index, message, line = self._examples[common]
        return ErrorSummary(self.rows, common, self._counts[common], index, message, line)


def errors_on_both(
    before: Sequence[EvaluationResult], after: Sequence[EvaluationResult]
) -> tuple[list[int], ErrorSummary | None]:
    """The rows (0-based) that are an error on both sides of a comparison, and — when that is every row,
    so the comparison compared nothing — what the first side's errors have in common (else None)."""
    both = [
        i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old.status != "ok" and new.status != "ok"
    ]
    if not both or len(both) < len(before):
        return both, None
    tally = ErrorTally()
    for index in both:
        error = before[index].error
        tally.add(
            index,
            error.type if error else before[index].status,
            error.message if error else "",
            error.line if error else None,
        )
    return both, tally.summary()
