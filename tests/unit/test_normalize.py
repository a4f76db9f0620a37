"""evaluator_host.evaluation.outcomes.normalize: every row of api.md's normalization table."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.evaluation.outcomes.normalize import ACCEPTED_SHAPES, normalize

NAN = {"$nonfinite": "nan"}
INF = {"$nonfinite": "inf"}
NEG_INF = {"$nonfinite": "-inf"}
UNDEFINED = {"$undefined": True}
UNSERIALIZABLE = {"$unserializable": "socket"}
MARKERS = [NAN, INF, NEG_INF, UNDEFINED, UNSERIALIZABLE]
INTERFACES = ["evaluate", "legacy", "main"]


def assert_invalid(value: Any, interface: str = "evaluate", threshold: float | None = None) -> str:
    """``value`` normalizes to an invalid_result; return its message."""
    norm = normalize(value, interface=interface, threshold=threshold)
    assert norm.invalid is not None, norm
    assert ACCEPTED_SHAPES in norm.invalid
    assert norm.score is None
    assert norm.passed is None
    assert norm.outputs == {}
    return norm.invalid


# --- booleans -----------------------------------------------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize(("value", "score"), [(True, 1.0), (False, 0.0)])
def test_bool_is_score_and_passed(interface: str, value: bool, score: float) -> None:
    norm = normalize(value, interface=interface, threshold=None)
    assert norm.invalid is None
    assert norm.score == score
    assert isinstance(norm.score, float)
    assert norm.passed is value
    assert norm.outputs == {}
    assert norm.details == {}
    assert norm.warnings == []


@pytest.mark.parametrize(("value", "threshold"), [(True, 2.0), (False, 0.0), (False, -1.0)])
def test_bool_passed_is_the_bool_whatever_the_threshold(value: bool, threshold: float) -> None:
    norm = normalize(value, interface="evaluate", threshold=threshold)
    assert norm.passed is value


# --- numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("value", [0, 1, 0.0, 0.25, 1.0, 0.999])
def test_number_in_range(interface: str, value: float) -> None:
    norm = normalize(value, interface=interface, threshold=None)
    assert norm.invalid is None
    assert norm.score == float(value)
    assert isinstance(norm.score, float)
    assert norm.passed is None
    assert norm.warnings == []
    assert norm.outputs == {}
    assert norm.details == {}


def test_int_becomes_float() -> None:
    norm = normalize(1, interface="evaluate", threshold=None)
    assert norm.score == 1.0
    assert type(norm.score) is float


@pytest.mark.parametrize(
    ("value", "threshold", "passed"),
    [
        (0.5, 0.5, True),  # >= is inclusive
        (0.49, 0.5, False),
        (0.9, 0.5, True),
        (0, 0.0, True),
        (1, 1.0, True),
        (0.0, 0.1, False),
    ],
)
def test_threshold_sets_passed(value: float, threshold: float, passed: bool) -> None:
    norm = normalize(value, interface="evaluate", threshold=threshold)
    assert norm.passed is passed
    assert norm.score == float(value)


def test_no_threshold_leaves_passed_null() -> None:
    assert normalize(0.7, interface="evaluate", threshold=None).passed is None


@pytest.mark.parametrize("value", [1.5, -0.1, 2, -3, 100.0, 1e9])
def test_out_of_range_warns_for_evaluate_interface(value: float) -> None:
    norm = normalize(value, interface="evaluate", threshold=None)
    assert norm.invalid is None
    assert norm.score == float(value)
    assert len(norm.warnings) == 1
    assert "outside [0, 1]" in norm.warnings[0]


@pytest.mark.parametrize("interface", ["legacy", "main"])
@pytest.mark.parametrize("value", [1.5, -0.1, 2, -3, 100.0])
def test_out_of_range_does_not_warn_for_other_interfaces(interface: str, value: float) -> None:
    norm = normalize(value, interface=interface, threshold=None)
    assert norm.invalid is None
    assert norm.score == float(value)
    assert norm.warnings == []


def test_out_of_range_still_applies_threshold() -> None:
    norm = normalize(5, interface="evaluate", threshold=1.0)
    assert norm.passed is True
    assert norm.warnings
    norm = normalize(-2.0, interface="evaluate", threshold=0.0)
    assert norm.passed is False


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_raw_nonfinite_floats_invalid(interface: str, value: float) -> None:
    assert_invalid(value, interface)


@pytest.mark.parametrize("interface", INTERFACES)
def test_int_too_large_for_a_float_is_invalid(interface: str) -> None:
    # JSON allows arbitrarily large integers; they are not finite floats.
    assert_invalid(10**400, interface)
    assert_invalid({"score": -(10**400)}, interface)
    assert_invalid({"big": 10**400}, interface)


# --- numeric strings (legacy only) --------------------------------------------------------


@pytest.mark.parametrize(("value", "score"), [("0.75", 0.75), ("1", 1.0), (" 0.5 ", 0.5), ("0", 0.0), ("2.5", 2.5)])
def test_numeric_string_accepted_for_legacy_with_warning(value: str, score: float) -> None:
    norm = normalize(value, interface="legacy", threshold=None)
    assert norm.invalid is None
    assert norm.score == score
    assert norm.passed is None
    assert len(norm.warnings) == 1
    assert "numeric string" in norm.warnings[0]


def test_numeric_string_legacy_applies_threshold() -> None:
    assert normalize("0.8", interface="legacy", threshold=0.5).passed is True
    assert normalize("0.2", interface="legacy", threshold=0.5).passed is False


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity", "1e400", "abc", "", "  ", "0.5x", "true"])
def test_non_numeric_or_nonfinite_string_invalid_for_legacy(value: str) -> None:
    message = assert_invalid(value, "legacy")
    assert "string" in message


@pytest.mark.parametrize("interface", ["evaluate", "main"])
@pytest.mark.parametrize("value", ["0.75", "1", "abc", ""])
def test_strings_invalid_for_non_legacy(interface: str, value: str) -> None:
    message = assert_invalid(value, interface)
    assert "string" in message


# --- score dicts --------------------------------------------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
def test_score_dict_number_with_details(interface: str) -> None:
    details = {"reason": "close enough", "tokens": 12, "nested": {"a": [1, 2, None]}, "flag": False}
    norm = normalize({"score": 0.8, **details}, interface=interface, threshold=None)
    assert norm.invalid is None
    assert norm.score == 0.8
    assert norm.passed is None
    assert norm.details == details
    assert norm.outputs == {}
    assert norm.warnings == []


def test_score_dict_without_details() -> None:
    norm = normalize({"score": 1}, interface="evaluate", threshold=None)
    assert norm.score == 1.0
    assert norm.details == {}


@pytest.mark.parametrize(("value", "score"), [(True, 1.0), (False, 0.0)])
def test_score_dict_with_bool_score(value: bool, score: float) -> None:
    norm = normalize({"score": value, "why": "x"}, interface="evaluate", threshold=None)
    assert norm.invalid is None
    assert norm.score == score
    assert norm.passed is value
    assert norm.details == {"why": "x"}


def test_score_dict_bool_score_ignores_threshold() -> None:
    assert normalize({"score": False}, interface="evaluate", threshold=0.0).passed is False


def test_score_dict_threshold() -> None:
    assert normalize({"score": 0.6}, interface="evaluate", threshold=0.5).passed is True
    assert normalize({"score": 0.4}, interface="main", threshold=0.5).passed is False


def test_score_dict_out_of_range_warns_for_evaluate_only() -> None:
    norm = normalize({"score": 7, "d": 1}, interface="evaluate", threshold=None)
    assert norm.score == 7.0
    assert norm.details == {"d": 1}
    assert any("outside [0, 1]" in w for w in norm.warnings)
    assert normalize({"score": 7}, interface="main", threshold=None).warnings == []
    assert normalize({"score": 7}, interface="legacy", threshold=None).warnings == []


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("score", ["0.5", "abc", ""])
def test_score_dict_string_score_invalid(interface: str, score: str) -> None:
    # numeric strings are a legacy compatibility for the bare return value only
    message = assert_invalid({"score": score}, interface)
    assert "string" in message


@pytest.mark.parametrize("interface", INTERFACES)
def test_score_dict_none_score_invalid(interface: str) -> None:
    assert_invalid({"score": None, "reason": "n/a"}, interface)


@pytest.mark.parametrize("marker", MARKERS)
def test_score_dict_marker_score_invalid(marker: dict[str, Any]) -> None:
    assert_invalid({"score": marker})


@pytest.mark.parametrize("score", [[1], {"a": 1}, float("nan")])
def test_score_dict_other_non_number_score_invalid(score: Any) -> None:
    assert_invalid({"score": score})


@pytest.mark.parametrize("marker", MARKERS)
def test_score_dict_with_non_json_details_invalid(marker: dict[str, Any]) -> None:
    assert_invalid({"score": 1.0, "extra": marker})
    assert_invalid({"score": 1.0, "extra": {"deep": [1, marker]}})


# --- named outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
def test_named_outputs(interface: str) -> None:
    norm = normalize({"accuracy": 0.9, "exact": True, "wrong": False, "count": 3}, interface=interface, threshold=0.5)
    assert norm.invalid is None
    assert norm.score is None
    assert norm.passed is None
    assert norm.outputs == {"accuracy": 0.9, "exact": 1.0, "wrong": 0.0, "count": 3.0}
    assert all(type(v) is float for v in norm.outputs.values())
    assert norm.details == {}


def test_named_outputs_out_of_range_not_warned() -> None:
    norm = normalize({"latency": 250}, interface="evaluate", threshold=None)
    assert norm.outputs == {"latency": 250.0}
    assert norm.invalid is None


@pytest.mark.parametrize(
    "bad",
    [None, [1], {"nested": 1}, float("nan"), float("inf"), NAN, INF, NEG_INF, UNDEFINED, UNSERIALIZABLE],
)
def test_named_outputs_with_non_numeric_value_invalid(bad: Any) -> None:
    message = assert_invalid({"good": 1.0, "bad": bad})
    assert "'bad'" in message


def test_named_outputs_string_value_invalid_even_for_legacy() -> None:
    assert_invalid({"a": "0.5"}, "legacy")


@pytest.mark.parametrize("interface", INTERFACES)
def test_empty_dict_invalid(interface: str) -> None:
    message = assert_invalid({}, interface)
    assert "empty dict" in message


# --- everything else is invalid -----------------------------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("value", [None, [], [1.0], [True, 0.5], ["a"], (1,), object()])
def test_other_values_invalid(interface: str, value: Any) -> None:
    assert_invalid(value, interface)


@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("marker", MARKERS)
def test_markers_invalid(interface: str, marker: dict[str, Any]) -> None:
    assert_invalid(marker, interface)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "None/null"),
        (UNDEFINED, "undefined"),
        (NAN, "nan"),
        (INF, "inf"),
        (NEG_INF, "-inf"),
        (UNSERIALIZABLE, "socket"),
        ([1], "list"),
        ("x", "string"),
    ],
)
def test_invalid_message_describes_the_value(value: Any, words: str) -> None:
    assert words in assert_invalid(value)


def test_accepted_shapes_names_every_shape() -> None:
    for shape in ("bool", "finite number", '{"score"', "named"):
        assert shape in ACCEPTED_SHAPES


def test_normalize_does_not_mutate_input() -> None:
    value = {"score": 0.5, "reason": {"a": 1}}
    snapshot = {"score": 0.5, "reason": {"a": 1}}
    normalize(value, interface="evaluate", threshold=0.1)
    assert value == snapshot


def test_warnings_not_shared_between_calls() -> None:
    first = normalize(2.0, interface="evaluate", threshold=None)
    second = normalize(0.5, interface="evaluate", threshold=None)
    assert len(first.warnings) == 1
    assert second.warnings == []
