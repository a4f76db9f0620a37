"""evaluator_host.aggregate: Stats over scores and named outputs, pass rate, errors."""

from __future__ import annotations

import math
import statistics

import pytest

from evaluator_host.aggregate import aggregate
from evaluator_host.models import EvaluationResult, Stats


def ok(score: float | None = None, passed: bool | None = None, **outputs: float) -> EvaluationResult:
    return EvaluationResult(status="ok", score=score, passed=passed, outputs=outputs, interface="evaluate", runtime={})


def failed(status: str = "error") -> EvaluationResult:
    return EvaluationResult(status=status, interface="evaluate", runtime={})


def assert_stats(stats: Stats | None, values: list[float], nan_count: int = 0) -> None:
    assert stats is not None
    assert stats.count == len(values)
    assert stats.nan_count == nan_count
    assert stats.mean == pytest.approx(statistics.fmean(values))
    assert stats.std == pytest.approx(statistics.pstdev(values), rel=1e-9, abs=1e-12)
    assert stats.min == min(values)
    assert stats.max == max(values)


def test_empty_input() -> None:
    agg = aggregate([])
    assert agg.count == 0
    assert agg.errors == 0
    assert agg.score is None
    assert agg.outputs == {}
    assert agg.pass_rate is None


def test_accepts_any_iterable() -> None:
    agg = aggregate(ok(score=s) for s in (0.0, 1.0))
    assert agg.count == 2
    assert_stats(agg.score, [0.0, 1.0])


def test_score_stats_population_std() -> None:
    values = [0.2, 0.4, 0.4, 0.4, 0.5, 0.5, 0.7, 0.9]
    agg = aggregate([ok(score=v) for v in values])
    assert agg.count == 8
    assert agg.errors == 0
    assert_stats(agg.score, values)
    assert agg.score is not None
    assert agg.score.std != pytest.approx(statistics.stdev(values))  # not the sample std


def test_known_values() -> None:
    agg = aggregate([ok(score=v) for v in (2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0)])
    assert agg.score == Stats(mean=5.0, std=2.0, min=2.0, max=9.0, count=8, nan_count=0)


def test_single_row() -> None:
    agg = aggregate([ok(score=0.3)])
    assert agg.score == Stats(mean=0.3, std=0.0, min=0.3, max=0.3, count=1, nan_count=0)


def test_constant_column_has_zero_std() -> None:
    agg = aggregate([ok(score=0.1) for _ in range(1000)])
    assert agg.score is not None
    assert agg.score.mean == pytest.approx(0.1)
    assert agg.score.std == pytest.approx(0.0, abs=1e-12)


def test_negative_and_large_scores() -> None:
    values = [-5.0, 1e6, 3.5, -0.25]
    assert_stats(aggregate([ok(score=v) for v in values]).score, values)


def test_errors_counted_and_missing_from_score() -> None:
    results = [ok(score=1.0), failed("error"), ok(score=0.0), failed("timeout"), ok(score=0.5)]
    agg = aggregate(results)
    assert agg.count == 5
    assert agg.errors == 2
    assert_stats(agg.score, [1.0, 0.0, 0.5], nan_count=2)


@pytest.mark.parametrize(
    "status", ["error", "invalid_result", "timeout", "memory_limit", "output_limit", "sandbox_error"]
)
def test_every_non_ok_status_is_an_error_row(status: str) -> None:
    agg = aggregate([ok(score=1.0), failed(status)])
    assert agg.errors == 1
    assert agg.score is not None
    assert agg.score.count == 1
    assert agg.score.nan_count == 1


def test_all_errors() -> None:
    agg = aggregate([failed(), failed("timeout"), failed("invalid_result")])
    assert agg.count == 3
    assert agg.errors == 3
    assert agg.score == Stats(mean=None, std=None, min=None, max=None, count=0, nan_count=3)
    assert agg.outputs == {}
    assert agg.pass_rate is None


def test_pass_rate_only_over_rows_with_passed() -> None:
    results = [
        ok(score=0.9, passed=True),
        ok(score=0.1, passed=False),
        ok(score=0.8, passed=True),
        ok(score=0.5),  # no threshold: not judged
        failed(),
    ]
    agg = aggregate(results)
    assert agg.pass_rate == pytest.approx(2 / 3)


def test_pass_rate_none_when_nothing_judged() -> None:
    assert aggregate([ok(score=0.5), ok(score=0.7), failed()]).pass_rate is None


@pytest.mark.parametrize(("passed", "rate"), [([True, True], 1.0), ([False, False, False], 0.0), ([True, False], 0.5)])
def test_pass_rate_bounds(passed: list[bool], rate: float) -> None:
    agg = aggregate([ok(score=1.0 if p else 0.0, passed=p) for p in passed])
    assert agg.pass_rate == rate


def test_bool_scores_aggregate_as_rate() -> None:
    agg = aggregate([ok(score=1.0, passed=True), ok(score=0.0, passed=False), ok(score=1.0, passed=True)])
    assert agg.score is not None
    assert agg.score.mean == pytest.approx(2 / 3)
    assert agg.pass_rate == pytest.approx(2 / 3)


def test_named_outputs_only_evaluator_has_no_score() -> None:
    results = [ok(accuracy=1.0, latency=2.0), ok(accuracy=0.0, latency=4.0), ok(accuracy=1.0, latency=6.0)]
    agg = aggregate(results)
    assert agg.score is None
    assert agg.pass_rate is None
    assert sorted(agg.outputs) == ["accuracy", "latency"]
    assert_stats(agg.outputs["accuracy"], [1.0, 0.0, 1.0])
    assert_stats(agg.outputs["latency"], [2.0, 4.0, 6.0])


def test_named_outputs_only_with_errors_still_has_no_score() -> None:
    agg = aggregate([ok(a=1.0), failed(), ok(a=0.0)])
    assert agg.score is None
    assert agg.errors == 1
    assert_stats(agg.outputs["a"], [1.0, 0.0], nan_count=1)


def test_named_output_appearing_only_in_later_rows() -> None:
    results = [ok(a=1.0), ok(a=0.0), failed(), ok(a=1.0, b=0.5), ok(b=0.25), ok(a=0.0, b=1.0)]
    agg = aggregate(results)
    assert agg.count == 6
    assert_stats(agg.outputs["a"], [1.0, 0.0, 1.0, 0.0], nan_count=2)
    assert_stats(agg.outputs["b"], [0.5, 0.25, 1.0], nan_count=3)
    for stats in agg.outputs.values():
        assert stats.count + stats.nan_count == agg.count


def test_named_output_appearing_in_the_last_row_only() -> None:
    agg = aggregate([failed(), ok(a=1.0), ok(a=1.0), ok(a=1.0, late=0.5)])
    assert agg.outputs["late"] == Stats(mean=0.5, std=0.0, min=0.5, max=0.5, count=1, nan_count=3)


def test_outputs_sorted_by_name() -> None:
    agg = aggregate([ok(zeta=1.0, alpha=0.0, mid=0.5)])
    assert list(agg.outputs) == ["alpha", "mid", "zeta"]


def test_score_and_outputs_together() -> None:
    agg = aggregate([ok(score=0.5, f1=0.4), ok(score=1.0, f1=0.6), failed()])
    assert_stats(agg.score, [0.5, 1.0], nan_count=1)
    assert_stats(agg.outputs["f1"], [0.4, 0.6], nan_count=1)


def test_stats_are_finite_json_numbers() -> None:
    agg = aggregate([ok(score=v) for v in (0.1, 0.2, 0.3)])
    assert agg.score is not None
    for value in (agg.score.mean, agg.score.std, agg.score.min, agg.score.max):
        assert value is not None and math.isfinite(value)
    assert agg.model_dump()["score"]["count"] == 3
