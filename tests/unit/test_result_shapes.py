"""Result shapes of other platforms (issue 13): reason, label, pass/passed, mixed dicts, label counts."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.outcomes.aggregate import Accumulator, aggregate
from evaluator_host.evaluation.outcomes.normalize import LABEL_CHARS, REASON_CHARS, normalize


def norm(value: Any, threshold: float | None = None, interface: str = "evaluate") -> Any:
    found = normalize(value, interface=interface, threshold=threshold)
    assert found.invalid is None, found.invalid
    return found


def test_promptfoo_pass_decides_passed_over_the_threshold_and_reason_is_top_level() -> None:
    found = norm({"pass": False, "score": 0.9, "reason": "missing the citation"}, threshold=0.5)
    assert (found.score, found.passed, found.reason) == (0.9, False, "missing the citation")
    assert found.details == {"pass": False, "reason": "missing the citation"}  # details keep every key


def test_phoenix_label_and_explanation() -> None:
    found = norm({"label": "relevant", "score": 1, "explanation": "answers the question"})
    assert (found.label, found.reason, found.score) == ("relevant", "answers the question", 1.0)


def test_opik_value_and_reason_are_a_named_output_and_a_reason() -> None:
    found = norm({"value": 0.8, "reason": "close"})
    assert found.outputs == {"value": 0.8} and found.reason == "close" and found.details == {"reason": "close"}


def test_a_categorical_label_alone_is_a_result() -> None:
    found = norm({"label": "positive", "comment": "upbeat"})
    assert (found.label, found.reason, found.outputs, found.score) == ("positive", "upbeat", {}, None)


def test_nemo_mixed_dict_numbers_become_outputs_and_strings_details() -> None:
    found = norm({"correct": True, "extracted": "42"})
    assert found.outputs == {"correct": 1.0} and found.details == {"extracted": "42"}


@pytest.mark.parametrize("key", ["pass", "passed"])
def test_a_boolean_pass_key_in_a_named_outputs_dict_sets_passed(key: str) -> None:
    found = norm({"f1": 0.4, key: True})
    assert found.passed is True and found.outputs == {"f1": 0.4, key: 1.0}


def test_a_non_boolean_pass_is_an_ordinary_key() -> None:
    found = norm({"score": 0.2, "pass": "yes"}, threshold=0.5)
    assert found.passed is False and found.details == {"pass": "yes"}


def test_reason_takes_the_first_string_of_reason_explanation_comment() -> None:
    assert norm({"score": 1, "reason": 3, "explanation": "e", "comment": "c"}).reason == "e"


def test_reason_and_label_are_capped_with_a_warning() -> None:
    found = norm({"score": 1, "reason": "r" * (REASON_CHARS + 5), "label": "l" * (LABEL_CHARS + 1)})
    assert len(found.reason) == REASON_CHARS and len(found.label) == LABEL_CHARS
    assert len(found.details["reason"]) == REASON_CHARS + 5
    assert len(found.warnings) == 2


@pytest.mark.parametrize("value", [{"extracted": "42"}, {"reason": "no value at all"}])
def test_a_dict_of_strings_only_is_still_invalid(value: dict[str, Any]) -> None:
    assert normalize(value, interface="evaluate", threshold=None).invalid is not None


def _result(label: str | None, status: str = "ok") -> EvaluationResult:
    return EvaluationResult(status=status, label=label, interface="evaluate", runtime={})  # type: ignore[arg-type]


def test_aggregates_count_labels() -> None:
    agg = aggregate([_result("good"), _result("bad"), _result("good"), _result(None), _result(None, "error")])
    assert agg.labels == {"bad": 1, "good": 2}


def test_label_counts_survive_a_job_state_round_trip_and_old_states_have_none() -> None:
    acc = Accumulator()
    for label in ("a", "b", "a"):
        acc.add(_result(label))
    assert Accumulator.restore(acc.state()).result().labels == {"a": 2, "b": 1}
    old = acc.state()
    del old["labels"]
    assert Accumulator.restore(old).result().labels == {}
