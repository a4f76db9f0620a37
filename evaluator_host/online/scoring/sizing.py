"""How many rows a scoring round claims, and how many one call of an evaluator runs (issue 55 §2: a round's fixed
costs — the claim's statements, the cases' reads, the worker call, the store's transactions — spread over more
rows while a backlog of fast rows waits).

Contract (docs/online.md, "How it works"):

* A rule's *pace* is kept per (rule, revision it runs) — the rule's pinned revision, else its evaluator's latest
  when the rows were claimed (``Claimed.revision``): a new revision is measured afresh. It is the mean
  ``duration_ms`` of the results of its last call that ran in a sandbox (:meth:`RoundSizes.measured`; results
  that stand for a run — an error no run made, an attempt given up, a ``sandbox_error`` — leave it as it was).
* One call (a group) runs at most :meth:`RoundSizes.group_cap` of a rule's rows: ``online_scoring_batch`` — or, for
  a (rule, revision) whose pace is known, as many as that pace fills in :data:`GROUP_S` seconds, up to
  ``online_scoring_batch_max``. One not measured yet, and a slow one (a judge's), run the calls they ran before.
* A (rule, revision) one of whose calls had results too large together (``LimitError``: the scorer ran its cases
  one by one) keeps calls of ``online_scoring_batch`` rows from then on (:meth:`RoundSizes.too_large`).
* A claim asks for :meth:`RoundSizes.claim_size` rows: ``online_scoring_batch`` at first; after a claim that got
  rows, the smallest cap among their rules. So a backlog of fast rows is claimed a large call at a time, and a
  claim that met a slow or new rule asks for ``online_scoring_batch`` again.
* :meth:`RoundSizes.split` cuts each rule's claimed rows into calls of its cap, and sets apart the rows of rules
  whose cap is ``online_scoring_batch`` past the first ``online_scoring_batch`` of them, in claim order (oldest
  first; the caller puts those back in the queue at once, no attempt counted): a large claim never holds more
  rows of slow or new rules than a claim of ``online_scoring_batch`` did.

Per service, in memory: a restarted service measures again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from evaluator_host.evaluation.models import EvaluationResult

__all__ = ["GROUP_S", "Key", "RoundSizes", "key_of"]

GROUP_S = 0.25  # a fast rule's call holds as many rows as its pace runs in this time (up to the batch max)


Key = tuple[str, int | None]  # (rule id, the revision its rows run)


class _Row(Protocol):
    @property
    def rule_id(self) -> str: ...
    @property
    def revision(self) -> int | None: ...


R = TypeVar("R", bound=_Row)


def key_of(row: _Row) -> Key:
    """A claimed row's (rule, revision)."""
    return (row.rule_id, row.revision)


class RoundSizes:
    """The claim and call sizes of one service's scorer (see the module docstring)."""

    def __init__(self, batch: int, batch_max: int) -> None:
        self.batch = max(1, batch)
        self.most = max(self.batch, batch_max)
        self.pace_ms: dict[Key, float] = {}  # (rule, revision) → mean duration_ms of its last call's results
        self.large: set[Key] = set()  # whose calls' results were too large together once
        self.next = self.batch  # what the next claim asks for
        self.asked = self.batch  # what the last claim asked for

    def group_cap(self, key: Key) -> int:
        """The most rows of ``key`` (rule, revision) one call runs."""
        pace = self.pace_ms.get(key)
        if pace is None or key in self.large:
            return self.batch
        fits = int(GROUP_S * 1000.0 / max(pace, 1e-3))
        return max(self.batch, min(self.most, fits))

    def claim_size(self) -> int:
        """How many rows the claim about to be made asks for (then :attr:`asked`: a claim that got fewer found
        no more waiting)."""
        self.asked = self.next
        return self.asked

    def measured(self, key: Key, results: Iterable[EvaluationResult]) -> None:
        """A call of ``key`` (rule, revision) gave ``results``: its pace is the mean ``duration_ms`` of those that
        ran in a sandbox (a runtime named, not ``sandbox_error``); none: unchanged."""
        took = [r.duration_ms for r in results if r.runtime and r.status != "sandbox_error"]
        if took:
            self.pace_ms[key] = sum(took) / len(took)

    def too_large(self, key: Key) -> None:
        """A call of ``key`` had results too large together: its calls hold ``batch`` rows from now on."""
        self.large.add(key)

    def split(self, groups: Iterable[Sequence[R]]) -> tuple[list[list[R]], list[R]]:
        """(the calls to run, the rows to put back): each group (one rule's claimed rows, in claim order) cut into
        calls of its rule's cap; rows of rules whose cap is the batch past the claim's first ``batch`` of them put
        back. Sets the next claim's size: the smallest cap among the rules met (unchanged when there were none)."""
        calls: list[list[R]] = []
        back: list[R] = []
        room = self.batch  # rows of slow or new rules this claim may hold
        caps: list[int] = []
        for rows in groups:
            if not rows:
                continue
            cap = self.group_cap(key_of(rows[0]))
            caps.append(cap)
            if cap <= self.batch:
                kept, room = list(rows[:room]), max(0, room - len(rows))
                back.extend(rows[len(kept) :])
                rows = kept
            calls.extend(list(rows[start : start + cap]) for start in range(0, len(rows), cap))
        if caps:
            self.next = min(caps)
        return calls, back
