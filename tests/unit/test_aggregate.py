"""results.aggregate: stats over scores and named outputs, pass rate, errors; Accumulator state/restore."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.outcomes.aggregate import Accumulator, aggregate
from evaluator_host.evaluation.outcomes.aggregate_models import Stats


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


# --------------------------------------------------------------------------- Accumulator.state() / restore()

# scores, errors, pass/fail, and named outputs that first appear mid-stream (some only after an error)
MIXED: list[EvaluationResult] = [
    ok(score=0.5, passed=True),
    failed(),
    ok(score=-2.25, passed=False, f1=0.4),
    ok(score=1e6),
    failed("timeout"),
    ok(score=0.1, passed=True, f1=0.6, recall=1.0),
    ok(score=0.3, late=7.0),
    failed("invalid_result"),
    ok(score=0.7, passed=False, f1=0.0, recall=0.25, last=-1.0),
]


def feed(acc: Accumulator, results: list[EvaluationResult]) -> Accumulator:
    for result in results:
        acc.add(result)
    return acc


def through_json(acc: Accumulator) -> Accumulator:
    """What a resumed job gets back: the snapshot stored as JSON and restored."""
    return Accumulator.restore(json.loads(json.dumps(acc.state(), allow_nan=False)))


@pytest.mark.parametrize("rows", range(len(MIXED) + 1))
def test_state_round_trip_through_json_gives_the_same_result(rows: int) -> None:
    acc = feed(Accumulator(), MIXED[:rows])
    restored = through_json(acc)
    assert restored.result() == acc.result()
    assert restored.result() == aggregate(MIXED[:rows])
    assert restored.state() == json.loads(json.dumps(acc.state()))


def test_state_round_trip_of_the_mixed_stream() -> None:
    agg = through_json(feed(Accumulator(), MIXED)).result()
    assert agg.count == 9
    assert agg.errors == 3
    assert_stats(agg.score, [0.5, -2.25, 1e6, 0.1, 0.3, 0.7], nan_count=3)
    assert list(agg.outputs) == ["f1", "last", "late", "recall"]
    assert_stats(agg.outputs["f1"], [0.4, 0.6, 0.0], nan_count=6)
    assert_stats(agg.outputs["recall"], [1.0, 0.25], nan_count=7)
    assert agg.outputs["late"] == Stats(mean=7.0, std=0.0, min=7.0, max=7.0, count=1, nan_count=8)
    assert agg.outputs["last"] == Stats(mean=-1.0, std=0.0, min=-1.0, max=-1.0, count=1, nan_count=8)
    assert agg.pass_rate == pytest.approx(2 / 4)


@pytest.mark.parametrize("state", [None, {}])
def test_restore_nothing_is_an_empty_accumulator(state: dict[str, object] | None) -> None:
    acc = Accumulator.restore(state)
    assert acc.result() == aggregate([])
    assert acc.state() == Accumulator().state()
    assert feed(acc, MIXED).result() == aggregate(MIXED)


@pytest.mark.parametrize("split", range(len(MIXED) + 1))
def test_resume_equals_one_uninterrupted_accumulator(split: int) -> None:
    resumed = feed(through_json(feed(Accumulator(), MIXED[:split])), MIXED[split:])
    whole = feed(Accumulator(), MIXED)
    assert resumed.result() == whole.result()
    assert resumed.state() == whole.state()


def test_resume_after_every_row() -> None:
    acc = Accumulator.restore(None)
    for result in MIXED:
        acc = through_json(acc)
        acc.add(result)
    assert through_json(acc).result() == aggregate(MIXED)


def test_resume_several_times_with_outputs_appearing_after_a_resume() -> None:
    results = [ok(score=float(i), passed=i % 2 == 0) if i % 4 else failed() for i in range(40)]
    results += [ok(score=2.0, newcomer=0.5), ok(newcomer=1.5), failed()]
    acc = Accumulator()
    for start in range(0, len(results), 7):
        acc = feed(through_json(acc), results[start : start + 7])
    agg = acc.result()
    assert agg == aggregate(results)
    assert agg.outputs["newcomer"].nan_count == len(results) - 2


def test_empty_columns_keep_their_infinities_through_json() -> None:
    acc = feed(Accumulator(), [ok(a=1.0), ok(a=3.0), failed()])  # named outputs only: the score column is empty
    state = acc.state()
    text = json.dumps(state, allow_nan=False)  # would raise on a bare inf
    assert "Infinity" not in text and "NaN" not in text
    restored = Accumulator.restore(json.loads(text))
    assert restored.result() == acc.result()
    assert restored.result().score is None
    # the restored +inf / -inf still act as min / max identities for later values
    restored.add(ok(score=-5.0, a=2.0))
    restored.add(ok(score=4.0))
    assert restored.result().score == Stats(mean=-0.5, std=4.5, min=-5.0, max=4.0, count=2, nan_count=3)
    assert restored.result() == aggregate([ok(a=1.0), ok(a=3.0), failed(), ok(score=-5.0, a=2.0), ok(score=4.0)])


def test_fresh_accumulator_state_is_json_safe() -> None:
    state = Accumulator().state()
    restored = Accumulator.restore(json.loads(json.dumps(state, allow_nan=False)))
    assert restored.result() == aggregate([])
    restored.add(ok(score=-1e300))
    restored.add(ok(score=1e300))
    assert restored.result().score is not None
    assert (restored.result().score.min, restored.result().score.max) == (-1e300, 1e300)


@pytest.mark.parametrize("rows", range(len(MIXED) + 1))
def test_state_is_always_strict_json(rows: int) -> None:
    json.dumps(feed(Accumulator(), MIXED[:rows]).state(), allow_nan=False)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_all_error_stream(n: int) -> None:
    statuses = ["error", "timeout", "invalid_result", "memory_limit", "output_limit", "sandbox_error"]
    acc = feed(Accumulator(), [failed(statuses[i % len(statuses)]) for i in range(n)])
    for agg in (acc.result(), through_json(acc).result()):
        assert agg.count == n
        assert agg.errors == n
        assert agg.score == Stats(mean=None, std=None, min=None, max=None, count=0, nan_count=n)
        assert agg.outputs == {}
        assert agg.pass_rate is None


def test_empty_stream() -> None:
    for acc in (Accumulator(), through_json(Accumulator())):
        agg = acc.result()
        assert agg.count == 0
        assert agg.errors == 0
        assert agg.score is None
        assert agg.outputs == {}
        assert agg.pass_rate is None


def test_mean_of_huge_scores_does_not_overflow() -> None:
    agg = aggregate([ok(score=1e308), ok(score=1e308)])
    assert agg.score is not None and agg.score.mean == pytest.approx(1e308) and agg.score.max == 1e308


def test_named_output_columns_are_capped() -> None:
    from evaluator_host.evaluation.outcomes.aggregate import MAX_OUTPUT_COLUMNS

    agg = aggregate([ok(**{f"k{i}": 1.0}) for i in range(MAX_OUTPUT_COLUMNS + 50)])
    assert len(agg.outputs) == MAX_OUTPUT_COLUMNS and agg.count == MAX_OUTPUT_COLUMNS + 50


# --------------------------------------------------------------------------- the score histogram


def test_histogram_counts_scores_in_ten_bins_over_zero_to_one_and_apart_outside() -> None:
    results = [ok(s) for s in (0.0, 0.05, 0.1, 0.25, 0.999, 1.0, 1.0, -0.5, 2.0)] + [failed(), ok(exact=1.0)]
    hist = aggregate(results).histogram
    assert hist is not None
    assert hist.edges == pytest.approx([i / 10 for i in range(11)])
    assert hist.counts == [2, 1, 1, 0, 0, 0, 0, 0, 0, 3]  # 0.1 opens the second bin; 1.0 closes the last
    assert (hist.below, hist.above) == (1, 1)


def test_no_histogram_without_scores() -> None:
    assert aggregate([failed(), ok(exact=1.0)]).histogram is None


def test_histogram_survives_state_and_restore_and_older_states_start_it_empty() -> None:
    acc = Accumulator()
    for score in (0.2, 0.9):
        acc.add(ok(score))
    assert through_json(acc).result().histogram == acc.result().histogram
    older = acc.state()
    del older["histogram"]  # committed by a version without histograms
    resumed = Accumulator.restore(older)
    resumed.add(ok(0.5))
    assert resumed.result().histogram is not None and resumed.result().histogram.counts[5] == 1


# --------------------------------------------------------------------------- merging (queued jobs' hosts)


def _mixed(n: int, offset: int = 0) -> list[EvaluationResult]:
    made: list[EvaluationResult] = []
    for i in range(offset, offset + n):
        if i % 7 == 3:
            made.append(failed())
        elif i % 5 == 0:
            made.append(ok(i / 100, passed=i % 2 == 0, f1=0.5, **({"extra": 1.0} if i % 10 == 0 else {})))
        else:
            result = ok((i % 11) / 10, passed=i % 3 == 0)
            result.label = f"l{i % 4}"
            made.append(result)
    return made


@pytest.mark.parametrize("cut", [0, 1, 17, 60, 120])
def test_merging_two_accumulators_equals_adding_every_result_to_one(cut: int) -> None:
    results = _mixed(120)
    whole, first, second = Accumulator(), Accumulator(), Accumulator()
    for result in results:
        whole.add(result)
    for result in results[:cut]:
        first.add(result)
    for result in results[cut:]:
        second.add(result)
    first.merge(Accumulator.restore(json.loads(json.dumps(second.state()))))  # as stored between hosts
    merged, expected = first.result(), whole.result()
    assert merged.count == expected.count and merged.errors == expected.errors
    assert merged.pass_rate == expected.pass_rate and merged.labels == expected.labels
    assert merged.histogram == expected.histogram
    for name, stats in [("score", merged.score), *merged.outputs.items()]:
        want = expected.score if name == "score" else expected.outputs[name]
        assert stats is not None and want is not None
        assert (stats.count, stats.nan_count, stats.min, stats.max) == (want.count, want.nan_count, want.min, want.max)
        assert stats.mean == pytest.approx(want.mean, abs=1e-12)
        assert stats.std == pytest.approx(want.std, abs=1e-12)
    assert set(merged.outputs) == set(expected.outputs) == {"f1", "extra"}


def test_merging_a_million_zero_one_scores_keeps_the_mean_exact() -> None:
    parts = []
    one, zero = ok(1.0), ok(0.0)  # made once: a result's model costs 5x the add that reads it
    for _ in range(10):
        part = Accumulator()
        for i in range(100_000):
            part.add(one if i % 4 else zero)
        parts.append(part)
    total = Accumulator()
    for part in parts:
        total.merge(part)
    stats = total.result().score
    assert stats is not None and stats.count == 1_000_000 and stats.mean == 0.75
