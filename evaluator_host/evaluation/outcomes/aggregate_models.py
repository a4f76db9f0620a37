"""The API models of aggregates over results (``aggregate`` of a ``cases`` answer, a job's and a
comparison's aggregates): what :mod:`evaluator_host.evaluation.outcomes.aggregate` computes. Pure models, no
imports of the evaluation package, so the results' models and the aggregation both build on them."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["Aggregate", "Histogram", "Stats"]


class Stats(BaseModel):
    """Summary statistics of one numeric column."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    count: int
    nan_count: int


class Histogram(BaseModel):
    """Scores counted in ``len(counts)`` equal bins over [0, 1] (a bin holds ``edges[i] <= score < edges[i+1]``,
    the last one 1.0 too); scores outside [0, 1] are counted in ``below`` / ``above``."""

    edges: list[float]
    counts: list[int]
    below: int = 0
    above: int = 0


class Aggregate(BaseModel):
    """Aggregates over a set of results."""

    count: int
    errors: int
    score: Stats | None
    outputs: dict[str, Stats]
    pass_rate: float | None
    labels: dict[str, int] = Field(default_factory=dict, description="How many rows returned each label.")
    histogram: Histogram | None = Field(
        None, description="The scores' distribution (this implementation); null when no row has a score."
    )
