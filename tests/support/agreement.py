"""An independent computation of agreement figures for the review tests, written differently from
``review/metrics.py``: Cohen's kappa pairwise (observed and chance agreement summed over the two classes
from the label lists), ranks by counting (1 + #smaller + (#equal - 1) / 2), Spearman's rho by the
1 - 6Σd²/(n(n²-1)) formula where no tie exists and by the covariance of ranks around (n + 1) / 2 otherwise."""

from __future__ import annotations

import math

__all__ = ["count_ranks", "kappa_pairwise", "spearman"]


def kappa_pairwise(truth: list[bool], said: list[bool]) -> float | None:
    n = len(truth)
    observed = sum(1 for a, b in zip(truth, said, strict=True) if a == b) / n
    expected = sum((truth.count(c) / n) * (said.count(c) / n) for c in (True, False))
    return None if expected == 1 else (observed - expected) / (1 - expected)


def count_ranks(values: list[float]) -> list[float]:
    return [1 + sum(w < v for w in values) + (sum(w == v for w in values) - 1) / 2 for v in values]


def spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = count_ranks(xs), count_ranks(ys)
    n = len(xs)
    if len(set(xs)) == n and len(set(ys)) == n:
        return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))
    mean = (n + 1) / 2  # the mean rank, ties or not
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry, strict=True))
    return cov / math.sqrt(sum((a - mean) ** 2 for a in rx) * sum((b - mean) ** 2 for b in ry))
