"""Aggregates over evaluation results (shared by ``cases`` and jobs).

``Stats`` per column: mean, population std, min, max, count of values and
``nan_count`` of rows without a value (errors, timeouts, invalid results). Booleans
arrive as 1.0/0.0, so their mean is a rate. ``score`` is null for no rows, and for an
evaluator that returns named outputs only. At most ``MAX_OUTPUT_COLUMNS`` named outputs
are aggregated (the first seen), so an evaluator inventing a name per row stays O(1).
``labels`` counts the rows of each returned label (at most ``MAX_LABELS`` distinct labels, the
first seen). ``histogram`` counts scores in ``HISTOGRAM_BINS`` equal bins over [0, 1], with the
scores outside that range counted apart (``below`` / ``above``); fixed bins, so it adds up
incrementally and its state stays a dozen integers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from evaluator_host.evaluation.outcomes.aggregate_models import Aggregate, Histogram, Stats
from evaluator_host.evaluation.outcomes.result_models import EvaluationResult

__all__ = ["HISTOGRAM_BINS", "MAX_LABELS", "MAX_OUTPUT_COLUMNS", "Accumulator", "Scored", "aggregate"]

MAX_OUTPUT_COLUMNS = 256  # named outputs aggregated at most (the first seen); results keep them all
MAX_LABELS = 256  # distinct labels counted at most (the first seen)
HISTOGRAM_BINS = 10
_EDGES = [i / HISTOGRAM_BINS for i in range(HISTOGRAM_BINS + 1)]


def _slot(score: float) -> int:
    """The histogram slot of ``score``: its bin over [0, 1] (1.0 in the last), or below / above."""
    if score < 0:
        return HISTOGRAM_BINS
    if score > 1:
        return HISTOGRAM_BINS + 1
    return min(int(score * HISTOGRAM_BINS), HISTOGRAM_BINS - 1)


class Scored(Protocol):
    """What aggregation reads of a result (an :class:`EvaluationResult`, or a job's stored row)."""

    @property
    def status(self) -> str: ...
    @property
    def score(self) -> float | None: ...
    @property
    def passed(self) -> bool | None: ...
    @property
    def outputs(self) -> Mapping[str, float] | None: ...
    @property
    def label(self) -> str | None: ...


class _Column:
    """Running mean/variance with min/max in O(1) memory.

    The variance is Welford's; the reported mean is a compensated (Neumaier) sum over
    the count, so a million 0/1 scores averaging 0.75 report exactly 0.75.
    """

    def __init__(self) -> None:
        self.n = 0
        self.missing = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.lo = math.inf
        self.hi = -math.inf
        self.total = 0.0
        self.carry = 0.0

    def add(self, value: float | None) -> None:
        if value is None:
            self.missing += 1
            return
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)
        self._sum(value)
        if value < self.lo:
            self.lo = value
        if value > self.hi:
            self.hi = value

    def add_many(self, values: Sequence[float]) -> None:
        """Add every value of ``values`` (what :meth:`add` one at a time does, up to float rounding): the
        batch's exact sum and two-pass variance, merged in (several times cheaper per value)."""
        if not values:
            return
        n = len(values)
        try:
            total = math.fsum(values)
            mean = total / n
            m2 = math.fsum([(v - mean) * (v - mean) for v in values])
        except (OverflowError, ValueError):  # beyond the float range: one at a time, as add would
            m2 = math.inf
        if not math.isfinite(m2):
            for value in values:
                self.add(value)
            return
        batch = _Column()
        batch.n, batch.mean, batch.m2, batch.total = n, mean, m2, total
        batch.lo, batch.hi = min(values), max(values)
        self.merge(batch)

    def _sum(self, value: float) -> None:
        """``total += value`` with Neumaier's compensation (the lost low-order part goes to ``carry``)."""
        total = self.total + value
        if abs(self.total) >= abs(value):
            self.carry += (self.total - total) + value
        else:
            self.carry += (value - total) + self.total
        self.total = total

    def state(self) -> list[float]:
        return [self.n, self.missing, self.mean, self.m2, self.lo, self.hi, self.total, self.carry]

    @classmethod
    def restore(cls, state: list[float]) -> _Column:
        column = cls()
        n, missing, column.mean, column.m2, column.lo, column.hi, column.total, column.carry = state
        column.n, column.missing = int(n), int(missing)
        return column

    def merge(self, other: _Column) -> None:
        """Account for every value ``other`` saw (Chan et al.'s pairwise update; sums stay compensated)."""
        self.missing += other.missing
        if not other.n:
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * (self.n * other.n / n)
        self.mean += delta * (other.n / n)  # the weight first: delta * other.n alone may overflow
        self.n = n
        self._sum(other.total)
        self._sum(other.carry)
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)

    def _mean(self) -> float:
        exact = (self.total + self.carry) / self.n
        return exact if math.isfinite(exact) else self.mean  # a sum beyond the float range: Welford's

    def stats(self) -> Stats:
        if not self.n:
            return Stats(mean=None, std=None, min=None, max=None, count=0, nan_count=self.missing)
        return Stats(
            mean=self._mean(),
            std=math.sqrt(self.m2 / self.n),
            min=self.lo,
            max=self.hi,
            count=self.n,
            nan_count=self.missing,
        )


class Accumulator:
    """Feed results one at a time; ``result()`` gives the :class:`Aggregate`."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.score = _Column()
        self.outputs: dict[str, _Column] = {}
        self.passed = 0
        self.judged = 0
        self.labels: dict[str, int] = {}
        self.bins = [0] * (HISTOGRAM_BINS + 2)  # the bins over [0, 1], then below and above

    def add(self, result: Scored) -> None:
        """Account for one result."""
        self.count += 1
        if result.status != "ok":
            self.errors += 1
        self.score.add(result.score)
        if result.score is not None:
            self.bins[_slot(result.score)] += 1
        outputs = result.outputs or {}
        if outputs:
            for name in outputs.keys() - self.outputs.keys():
                if len(self.outputs) >= MAX_OUTPUT_COLUMNS:
                    break  # an evaluator inventing names per row must not make aggregation quadratic
                column = self.outputs[name] = _Column()
                column.missing = self.count - 1  # rows seen before this output first appeared
        for name, column in self.outputs.items():
            column.add(outputs.get(name))
        if result.passed is not None:
            self.judged += 1
            self.passed += result.passed
        if result.label is not None and (result.label in self.labels or len(self.labels) < MAX_LABELS):
            self.labels[result.label] = self.labels.get(result.label, 0) + 1

    def add_all(self, results: Iterable[Scored]) -> None:
        """Account for every result of ``results``: what :meth:`add` one at a time does (up to float
        rounding), with the plain ones (ok, a score, no outputs, no label: most rows of most jobs)
        accounted for together. Order does not matter to the outcome: an output column counts as
        missing every row without it, whenever the column first appeared."""
        scores: list[float] = []
        passed = judged = 0
        add = self.add
        for result in results:
            score = result.score
            if score is None or result.status != "ok" or result.outputs or result.label is not None:
                add(result)
                continue
            scores.append(score)
            flag = result.passed
            if flag is not None:
                judged += 1
                passed += flag
        if not scores:
            return
        n = len(scores)
        self.count += n
        self.passed += passed
        self.judged += judged
        for column in self.outputs.values():
            column.missing += n
        self.score.add_many(scores)
        bins, top = self.bins, HISTOGRAM_BINS - 1
        inside = [min(int(score * HISTOGRAM_BINS), top) for score in scores if 0.0 <= score <= 1.0]
        for slot, k in Counter(inside).items():
            bins[slot] += k
        below = sum(1 for score in scores if score < 0.0)
        bins[HISTOGRAM_BINS] += below
        bins[HISTOGRAM_BINS + 1] += n - len(inside) - below

    def add_bools(self, trues: int, falses: int) -> None:
        """Account for ``trues`` results scored 1 that passed and ``falses`` scored 0 that did not (bools a
        job's evaluator returned): what :meth:`add` of each does (up to float rounding)."""
        n = trues + falses
        if not n:
            return
        self.count += n
        self.passed += trues
        self.judged += n
        for column in self.outputs.values():
            column.missing += n
        batch = _Column()  # n values of which trues are 1 and the rest 0: the moments in closed form
        batch.n, batch.total, batch.mean, batch.m2 = n, float(trues), trues / n, trues * falses / n
        batch.lo, batch.hi = (0.0 if falses else 1.0), (1.0 if trues else 0.0)
        self.score.merge(batch)
        self.bins[0] += falses
        self.bins[HISTOGRAM_BINS - 1] += trues

    def merge(self, other: Accumulator) -> None:
        """Account for every result ``other`` saw, as if they had been added here after these (what
        hosts committing chunks of one job concurrently do; the first ``MAX_OUTPUT_COLUMNS`` /
        ``MAX_LABELS`` seen stay the bound)."""
        for name in other.outputs.keys() - self.outputs.keys():
            if len(self.outputs) >= MAX_OUTPUT_COLUMNS:
                break
            column = self.outputs[name] = _Column()
            column.missing = self.count  # rows seen here before this output appeared
        for name, column in self.outputs.items():
            theirs = other.outputs.get(name)
            if theirs is None:
                column.missing += other.count
            else:
                column.merge(theirs)
        self.count += other.count
        self.errors += other.errors
        self.score.merge(other.score)
        self.passed += other.passed
        self.judged += other.judged
        for label, n in other.labels.items():
            if label in self.labels or len(self.labels) < MAX_LABELS:
                self.labels[label] = self.labels.get(label, 0) + n
        self.bins = [a + b for a, b in zip(self.bins, other.bins, strict=True)]

    def state(self) -> dict[str, Any]:
        """A JSON-safe snapshot (infinities as strings) that :meth:`restore` turns back into this."""
        columns = {"": self.score.state(), **{f"o:{k}": c.state() for k, c in self.outputs.items()}}
        return {
            "count": self.count,
            "errors": self.errors,
            "passed": self.passed,
            "judged": self.judged,
            "labels": dict(self.labels),
            "histogram": list(self.bins),
            "columns": {k: [v if math.isfinite(v) else repr(v) for v in s] for k, s in columns.items()},
        }

    @classmethod
    def restore(cls, state: dict[str, Any] | None) -> Accumulator:
        """The accumulator a :meth:`state` snapshot was taken of (empty for ``None``)."""
        acc = cls()
        if not state:
            return acc
        acc.count, acc.errors = state["count"], state["errors"]
        acc.passed, acc.judged = state["passed"], state["judged"]
        acc.labels = dict(state.get("labels", {}))  # states committed before labels existed have none
        acc.bins = list(state.get("histogram", acc.bins))  # nor before the histogram: it counts from now on
        for key, values in state["columns"].items():
            column = _Column.restore([float(v) for v in values])
            if key:
                acc.outputs[key[2:]] = column
            else:
                acc.score = column
        return acc

    def result(self) -> Aggregate:
        """The aggregate so far."""
        return Aggregate(
            count=self.count,
            errors=self.errors,
            score=None if not self.count or (not self.score.n and self.outputs) else self.score.stats(),
            outputs={name: col.stats() for name, col in sorted(self.outputs.items())},
            pass_rate=self.passed / self.judged if self.judged else None,
            labels=dict(sorted(self.labels.items())),
            histogram=self._histogram(),
        )

    def _histogram(self) -> Histogram | None:
        if not any(self.bins):
            return None
        below, above = self.bins[HISTOGRAM_BINS:]
        return Histogram(edges=_EDGES, counts=self.bins[:HISTOGRAM_BINS], below=below, above=above)


def aggregate(results: Iterable[EvaluationResult]) -> Aggregate:
    """Aggregate ``results``."""
    acc = Accumulator()
    for result in results:
        acc.add(result)
    return acc.result()
