"""Properties of result normalization, stored results and aggregation, over generated values (Hypothesis).

Whatever an evaluator returns — any JSON the harness can send, non-finite markers, huge
integers, nested and oversized values — normalization answers (never raises), and what it
answers is a result the API can serialize as strict JSON: a finite score or none, finite
named outputs, ``passed`` consistent with the threshold, ``reason``/``label`` within their caps.
A stored result is within its byte cap whatever its output, and an aggregate's running state
survives a restore (what a resumed job relies on).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator_host.evaluation.models import EvaluationResult, EvaluatorSettings
from evaluator_host.evaluation.outcomes.aggregate import Accumulator, aggregate
from evaluator_host.evaluation.outcomes.normalize import LABEL_CHARS, PASS_KEYS, REASON_CHARS, normalize
from evaluator_host.evaluation.path import Prepared, to_result
from evaluator_host.jobs.stored_form import stored_form
from evaluator_host.sandbox.base import RawOutcome

INTERFACES = st.sampled_from(["evaluate", "legacy", "main"])
THRESHOLDS = st.none() | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
MARKERS = st.sampled_from(
    [{"$nonfinite": "nan"}, {"$nonfinite": "inf"}, {"$nonfinite": "-inf"}, {"$undefined": True}]
) | st.builds(lambda name: {"$unserializable": name}, st.text(max_size=20))
NUMBERS = st.integers(min_value=-(10**400), max_value=10**400) | st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | NUMBERS | st.text(max_size=50) | MARKERS
KEYS = st.sampled_from(["score", "reason", "explanation", "comment", "label", "pass", "passed", "value"]) | st.text(
    max_size=10
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=20,
)
LONG_TEXT = st.integers(min_value=0, max_value=3 * REASON_CHARS).map(lambda n: "r" * n)


def _strict_json(value: Any) -> str:
    return json.dumps(value, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(value=VALUES, interface=INTERFACES, threshold=THRESHOLDS)
def test_normalize_answers_every_value_with_finite_json(value: Any, interface: str, threshold: float | None) -> None:
    norm = normalize(value, interface=interface, threshold=threshold)
    if norm.invalid is not None:
        assert norm.score is None and norm.passed is None and norm.outputs == {}
        return
    assert norm.score is None or math.isfinite(norm.score)
    assert all(isinstance(v, float) and math.isfinite(v) for v in norm.outputs.values())
    _strict_json(norm.details)
    assert norm.reason is None or len(norm.reason) <= REASON_CHARS
    assert norm.label is None or len(norm.label) <= LABEL_CHARS
    explicit = isinstance(value, dict) and any(isinstance(value.get(k), bool) for k in PASS_KEYS)
    if norm.score is not None and not explicit and not isinstance(value, bool):
        if isinstance(value, dict) and isinstance(value.get("score"), bool):
            assert norm.passed is value["score"]
        elif threshold is None:
            assert norm.passed is None
        else:
            assert norm.passed is (norm.score >= threshold)


@given(value=st.booleans() | NUMBERS, interface=INTERFACES)
def test_a_bare_score_and_the_same_score_in_a_dict_normalize_alike(value: Any, interface: str) -> None:
    bare = normalize(value, interface=interface, threshold=0.5)
    wrapped = normalize({"score": value}, interface=interface, threshold=0.5)
    assert (bare.invalid is None) == (wrapped.invalid is None)
    assert (bare.score, bare.passed) == (wrapped.score, wrapped.passed)


@given(reason=LONG_TEXT, label=LONG_TEXT, score=st.floats(0, 1))
def test_reason_and_label_are_cut_to_their_caps_with_a_warning(reason: str, label: str, score: float) -> None:
    norm = normalize({"score": score, "reason": reason, "label": label}, interface="evaluate", threshold=None)
    assert norm.reason == reason[:REASON_CHARS] and norm.label == label[:LABEL_CHARS]
    assert norm.details["reason"] == reason  # details keep it whole
    assert any("cut" in w for w in norm.warnings) == (len(reason) > REASON_CHARS or len(label) > LABEL_CHARS)


SHARED: dict[str, Any] = {"interface": "evaluate", "runtime": {"id": "python-x", "language": "python", "packages": {}}}
OUTPUT_TEXT = st.text(max_size=2000) | st.integers(0, 200_000).map(lambda n: "é" * n)


@settings(max_examples=150, deadline=None)
@given(
    value=VALUES,
    status=st.sampled_from(["ok", "error", "timeout", "memory_limit", "output_limit"]),
    stdout=OUTPUT_TEXT,
    stderr=OUTPUT_TEXT,
    interface=INTERFACES,
    cap=st.integers(min_value=2048, max_value=1 << 16),
)
def test_every_outcome_becomes_a_result_stored_within_its_cap(
    value: Any, status: str, stdout: str, stderr: str, interface: str, cap: int
) -> None:
    prepared = Prepared("python", "", interface, "evaluate", {}, EvaluatorSettings(), "python-x")
    error = None if status == "ok" else {"type": "Timeout", "message": "m" * 5000, "line": 3, "traceback": "t" * 9000}
    raw = RawOutcome(status=status, value=value, error=error, stdout=stdout, stderr=stderr, duration_ms=1.5)
    result = to_result(raw, prepared, SHARED["runtime"])
    assert result.status in ("ok", "invalid_result", "error", "timeout", "memory_limit", "output_limit")
    json.loads(result.model_dump_json())  # the API's answer is JSON (no NaN, no Infinity)
    stored = stored_form(result, cap)
    assert len(stored.encode()) <= cap or len(stored) <= cap // 4
    kept = EvaluationResult.model_validate({**json.loads(stored), **SHARED})
    assert (kept.status, kept.score, kept.passed) == (result.status, result.score, result.passed)


RESULTS = st.builds(
    lambda status, score, named: EvaluationResult(
        status=status,
        score=score if status == "ok" else None,
        outputs=named if status == "ok" else {},
        **SHARED,
    ),
    st.sampled_from(["ok", "ok", "ok", "error", "timeout"]),
    st.none() | st.booleans().map(float) | st.floats(-1e9, 1e9),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(-1e9, 1e9), max_size=3),
)


@given(results=st.lists(RESULTS, max_size=60), cut=st.integers(min_value=0, max_value=60))
def test_an_aggregate_resumed_from_its_state_equals_one_computed_in_one_go(
    results: list[EvaluationResult], cut: int
) -> None:
    first = Accumulator()
    for result in results[:cut]:
        first.add(result)
    resumed = Accumulator.restore(json.loads(json.dumps(first.state())))  # as stored in the database
    for result in results[cut:]:
        resumed.add(result)
    whole = aggregate(results)
    assert resumed.result() == whole
    assert whole.count == len(results)
    if whole.score is not None and whole.score.count:
        assert whole.score.min - 1e-6 <= whole.score.mean <= whole.score.max + 1e-6
        assert whole.score.count + whole.score.nan_count == len(results)
