"""The rules that tell a differential run that compared nothing (migration/coverage.py) and what failed rows
have in common (evaluation/outcomes/error_summary.py), without a sandbox."""

from __future__ import annotations

import pytest

from evaluator_host.errors import NothingCompared
from evaluator_host.evaluation.models import Case, ErrorInfo, EvaluationResult
from evaluator_host.evaluation.outcomes.error_summary import MAX_TYPES, ErrorTally
from evaluator_host.migration.base import Reads
from evaluator_host.migration.coverage import Rows, check_answers, check_rows, columns_of, did_you_mean


def _result(status: str = "ok", error: str | None = None) -> EvaluationResult:
    info = ErrorInfo(type=error, message="boom", line=3) if error else None
    return EvaluationResult(status=status, error=info, interface="legacy", runtime={})  # type: ignore[arg-type]


def test_no_rows_compare_nothing_whatever_the_code_reads() -> None:
    for reads in (None, Reads()):
        with pytest.raises(NothingCompared) as refused:
            check_rows(reads, "correct_answer", Rows([], [], dataset=True))
        assert refused.value.field == "rows" and refused.value.rows == 0


def test_a_field_the_code_does_not_read_may_be_missing_everywhere() -> None:
    cases = [Case(inputs={"q": 1}, outputs=None)] * 3
    assert check_rows(Reads(output=False, correct_answer=False), "correct_answer", Rows(cases, ["q"], False)) == []


def test_did_you_mean_offers_close_spellings_then_the_usual_names_never_the_excluded() -> None:
    columns = ["question", "respons", "response", "correct_answer", "outputz"]
    assert did_you_mean("outputs", columns, ("response",), exclude=("correct_answer",)) == ["outputz", "response"]
    assert did_you_mean("correct_answer", ["correct_answers", "expected"], ("expected",)) == [
        "correct_answers",
        "expected",
    ]
    assert did_you_mean("x", [], ("x",)) == []


def test_the_cases_columns_are_their_inputs_keys_in_order() -> None:
    cases = [Case(inputs={"b": 1, "a": 2}), Case(inputs="text"), Case(inputs={"c": 3, "a": 1})]
    assert columns_of(cases) == ["b", "a", "c"]


def test_every_row_an_error_on_both_sides_is_refused_and_some_rows_are_a_warning() -> None:
    errors = [_result("error", "KeyError"), _result("error", "KeyError"), _result("timeout", "TimeoutError")]
    with pytest.raises(NothingCompared) as refused:
        check_answers(errors, errors, ["q"])
    assert refused.value.field == "errors" and "KeyError on 2 of 3 rows (e.g. row 0, line 3: boom)" in str(
        refused.value
    )
    mixed = [_result(), *errors[1:]]
    assert check_answers(mixed, mixed, ["q"]) == [
        "2 of 3 rows are errors on both versions: only their error type was compared"
    ]
    assert check_answers([_result()], [_result()], []) == []


def test_the_error_tally_stays_bounded_and_keeps_the_first_example_of_the_commonest_type() -> None:
    tally = ErrorTally()
    assert tally.summary() is None
    for index in range(MAX_TYPES + 50):
        tally.add(index, f"E{index}", "m", None)
    for index in range(3):
        tally.add(1000 + index, "E7", f"again {index}", 9)
    summary = tally.summary()
    assert summary is not None
    assert (summary.rows, summary.type, summary.count, summary.example_index) == (
        MAX_TYPES + 53,
        "other",
        50,
        MAX_TYPES,
    )
    tally = ErrorTally()
    tally.add(5, "ValueError", "x" * 2000, 4)
    found = tally.summary()
    assert found is not None and len(found.example_message) == 500 and found.fields()["example"]["line"] == 4
