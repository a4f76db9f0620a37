"""Agreement figures, pure (issue 53): an evaluator's answers against people's verdicts.

Contract: :func:`agreement` takes one :class:`Pair` per reviewed item — the human verdict is the truth and
``passed`` the positive class; an evaluator answer without ``passed`` (an error, a score without a
threshold) counts as *not passed* and is counted in ``unanswered``:

* ``confusion`` (tp: both passed; fp: the evaluator passed what people failed; fn: the reverse; tn: both
  failed) and ``accuracy`` = (tp + tn) / n;
* ``cohen_kappa`` from the counts, (p_o − p_e) / (1 − p_e) with p_e = ((tp+fp)(tp+fn) + (fn+tn)(fp+tn)) / n²;
  null with a reason when p_e = 1 (both sides gave one class only: chance agrees always);
* ``score_mae`` and ``spearman`` over the items where both gave a finite score (``scored``); Spearman's rho
  is Pearson's r of the ranks, ties given their average rank; null with a reason under two such items or
  when a side's scores are all equal;
* ``by_label``: per label the evaluator gave, its items' accuracy and the share of those people labelled
  the same (null when people gave none of them a label).

No pairs is the caller's to refuse (``NothingCompared``): nothing here answers zeros for no data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Figures", "Pair", "agreement", "ranks"]


@dataclass(frozen=True)
class Pair:
    """One reviewed item: the evaluator's answer and the verdict."""

    passed: bool | None
    score: float | None
    label: str | None
    human_passed: bool
    human_score: float | None = None
    human_label: str | None = None


@dataclass
class Figures:
    """What :func:`agreement` computes (see the module docstring)."""

    reviewed: int
    accuracy: float
    kappa: float | None
    kappa_reason: str | None
    tp: int
    fp: int
    fn: int
    tn: int
    unanswered: int
    scored: int
    score_mae: float | None
    spearman: float | None
    spearman_reason: str | None
    by_label: dict[str, tuple[int, float, float | None]] = field(default_factory=dict)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, ties given the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def agreement(pairs: Sequence[Pair]) -> Figures:
    """The figures of ``pairs`` (at least one; see the module docstring)."""
    if not pairs:
        raise ValueError("agreement needs at least one reviewed item")
    n = len(pairs)
    said = [p.passed is True for p in pairs]
    tp = sum(1 for p, s in zip(pairs, said, strict=True) if s and p.human_passed)
    fp = sum(1 for p, s in zip(pairs, said, strict=True) if s and not p.human_passed)
    fn = sum(1 for p, s in zip(pairs, said, strict=True) if not s and p.human_passed)
    tn = n - tp - fp - fn
    observed = (tp + tn) / n
    chance = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    kappa, kappa_reason = None, None
    if chance >= 1.0:
        kappa_reason = "people and the evaluator each gave one class only: chance agreement is 1, kappa is undefined"
    else:
        kappa = (observed - chance) / (1 - chance)
    both = [(float(p.score), float(p.human_score)) for p in pairs if _finite(p.score) and _finite(p.human_score)]  # type: ignore[arg-type]
    mae = sum(abs(a - b) for a, b in both) / len(both) if both else None
    rho, rho_reason = None, None
    if len(both) < 2:
        rho_reason = f"{len(both)} item(s) with both scores: spearman needs at least 2"
    else:
        rho = _pearson(ranks([a for a, _ in both]), ranks([b for _, b in both]))
        if rho is None:
            rho_reason = "one side gave every item the same score: spearman is undefined"
    by_label: dict[str, tuple[int, float, float | None]] = {}
    for label in sorted({p.label for p in pairs if p.label is not None}):
        group = [p for p in pairs if p.label == label]
        right = sum(1 for p in group if (p.passed is True) == p.human_passed)
        labelled = [p for p in group if p.human_label is not None]
        same = sum(1 for p in labelled if p.human_label == label) / len(labelled) if labelled else None
        by_label[label] = (len(group), right / len(group), same)
    return Figures(
        reviewed=n,
        accuracy=observed,
        kappa=kappa,
        kappa_reason=kappa_reason,
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        unanswered=sum(1 for p in pairs if p.passed is None),
        scored=len(both),
        score_mae=mae,
        spearman=rho,
        spearman_reason=rho_reason,
        by_label=by_label,
    )
