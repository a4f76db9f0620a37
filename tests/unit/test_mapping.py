"""evaluator_host.jobs.datasets.mapping.RowMapper: NeMo FieldMapping semantics, dataset row → evaluator case.

Covers the default mapping (whole row as inputs, ``outputs`` falling back to ``output``,
``trace``, ``app_params``, absent → None), named columns, an ``inputs`` list, dotted paths
into nested objects, the FieldMappingError for a column the dataset lacks (its message), and
the warning when nothing supplies ``outputs``.
"""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.errors import DefinitionError, FieldMappingError
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping

DEFAULT = FieldMapping()


def case(mapping: FieldMapping, columns: list[str], row: dict[str, Any]) -> dict[str, Any]:
    return RowMapper(mapping, columns).case(row)


# --------------------------------------------------------------------------- default mapping


def test_default_mapping_full_row() -> None:
    row = {"question": "2+2?", "outputs": "4", "trace": [{"step": 1}], "app_params": {"t": 0.1}}
    got = case(DEFAULT, list(row), row)
    assert got == {"inputs": row, "outputs": "4", "trace": [{"step": 1}], "app_params": {"t": 0.1}}
    assert "outputs" in got["inputs"]  # inputs is the whole row, the outputs column included
    assert list(got) == ["inputs", "outputs", "trace", "app_params"]


def test_default_outputs_falls_back_to_output() -> None:
    mapper = RowMapper(DEFAULT, ["q", "output"])
    assert mapper.case({"q": 1, "output": "o"})["outputs"] == "o"
    assert mapper.warnings == []


def test_default_outputs_prefers_outputs_over_output() -> None:
    mapper = RowMapper(DEFAULT, ["outputs", "output"])
    assert mapper.case({"outputs": "plural", "output": "singular"})["outputs"] == "plural"
    assert mapper.case({"output": "singular"})["outputs"] == "singular"  # decided per row


@pytest.mark.parametrize(
    "value",
    [{"text": "hi", "score": 0.5}, ["a", "b"], 0, "", False, 3.5],
    ids=["dict", "list", "zero", "empty-string", "false", "float"],
)
def test_default_outputs_keeps_any_value(value: Any) -> None:
    row = {"outputs": value}
    assert case(DEFAULT, ["outputs"], row)["outputs"] == value


def test_default_mapping_absent_columns_are_none() -> None:
    row = {"question": "q"}
    assert case(DEFAULT, ["question"], row) == {"inputs": row, "outputs": None, "trace": None, "app_params": None}


def test_default_mapping_row_missing_a_dataset_column() -> None:
    mapper = RowMapper(DEFAULT, ["q", "outputs", "trace", "app_params"])
    assert mapper.case({"q": 1}) == {"inputs": {"q": 1}, "outputs": None, "trace": None, "app_params": None}


def test_empty_row_and_no_columns() -> None:
    mapper = RowMapper(DEFAULT, [])
    assert mapper.warnings == []
    assert mapper.case({}) == {"inputs": {}, "outputs": None, "trace": None, "app_params": None}


# --------------------------------------------------------------------------- named columns


def test_outputs_mapped_to_a_column() -> None:
    row = {"prompt": "p", "model_expression": "x + 1", "outputs": "ignored"}
    got = case(FieldMapping(outputs="model_expression"), list(row), row)
    assert got["outputs"] == "x + 1"
    assert got["inputs"] == row


def test_outputs_mapped_column_missing_in_a_row_is_none() -> None:
    mapper = RowMapper(FieldMapping(outputs="model_expression"), ["model_expression", "output"])
    assert mapper.case({"output": "not used"})["outputs"] is None


def test_trace_and_app_params_mapped() -> None:
    row = {"steps": [1, 2], "params": {"temperature": 0}, "trace": "default trace", "app_params": "default params"}
    mapper = RowMapper(FieldMapping(trace="steps", app_params="params"), list(row))
    got = mapper.case(row)
    assert got["trace"] == [1, 2]
    assert got["app_params"] == {"temperature": 0}


def test_every_entry_mapped_together() -> None:
    mapping = FieldMapping(outputs="answer", trace="log", inputs=["question", "context"], app_params="cfg")
    row = {"question": "q", "context": "c", "answer": "a", "log": ["l"], "cfg": {"k": 1}, "extra": "dropped"}
    assert case(mapping, list(row), row) == {
        "inputs": {"question": "q", "context": "c"},
        "outputs": "a",
        "trace": ["l"],
        "app_params": {"k": 1},
    }


# --------------------------------------------------------------------------- inputs list


def test_inputs_list_keeps_only_those_columns_in_mapping_order() -> None:
    row = {"a": 1, "b": 2, "c": 3, "outputs": "o"}
    got = case(FieldMapping(inputs=["c", "a"]), list(row), row)
    assert got["inputs"] == {"c": 3, "a": 1}
    assert list(got["inputs"]) == ["c", "a"]
    assert got["outputs"] == "o"  # outputs still comes from the default column


def test_inputs_list_missing_in_a_row_is_none() -> None:
    assert case(FieldMapping(inputs=["a", "b"]), ["a", "b"], {"a": 1})["inputs"] == {"a": 1, "b": None}


def test_inputs_empty_list_gives_empty_inputs() -> None:
    assert case(FieldMapping(inputs=[]), ["a", "outputs"], {"a": 1, "outputs": "o"})["inputs"] == {}


def test_inputs_list_with_a_dotted_path() -> None:
    row = {"meta": {"lang": "en", "id": 7}, "q": "x"}
    got = case(FieldMapping(inputs=["q", "meta.lang"]), list(row), row)
    assert got["inputs"] == {"q": "x", "meta.lang": "en"}


def test_inputs_list_leaves_the_row_alone() -> None:
    row = {"a": 1, "b": 2}
    got = case(FieldMapping(inputs=["a"]), list(row), row)
    assert row == {"a": 1, "b": 2}
    assert got["inputs"] is not row


# --------------------------------------------------------------------------- dotted paths


@pytest.mark.parametrize(
    ("path", "row", "expected"),
    [
        ("response.text", {"response": {"text": "hi"}}, "hi"),
        ("response.meta.score", {"response": {"meta": {"score": 0.7}}}, 0.7),
        ("response.meta", {"response": {"meta": {"score": 0.7}}}, {"score": 0.7}),
        ("response.text", {"response": {"other": 1}}, None),  # missing leaf
        ("response.text", {}, None),  # the row lacks the column
        ("response.text", {"response": None}, None),
        ("response.text", {"response": "a string"}, None),  # not a dict in the middle
        ("response.text", {"response": ["text"]}, None),
        ("response.meta.score", {"response": {"meta": 3}}, None),
        ("response.meta.score", {"response": {"meta": [{"score": 1}]}}, None),
        ("response.text", {"response": {"text": None}}, None),
        ("response.text", {"response": {"text": {"deep": [1]}}}, {"deep": [1]}),
    ],
)
def test_dotted_path(path: str, row: dict[str, Any], expected: Any) -> None:
    for mapping, key in [
        (FieldMapping(outputs=path), "outputs"),
        (FieldMapping(trace=path), "trace"),
        (FieldMapping(app_params=path), "app_params"),
    ]:
        assert case(mapping, ["response", "other"], row)[key] == expected


def test_top_level_key_with_a_dot_wins_over_a_path() -> None:
    row = {"a.b": "flat", "a": {"b": "nested"}}
    assert case(FieldMapping(outputs="a.b"), ["a.b", "a"], row)["outputs"] == "flat"
    assert case(FieldMapping(outputs="a.b"), ["a"], {"a": {"b": "nested"}})["outputs"] == "nested"


def test_dotted_path_needs_its_head_column() -> None:
    with pytest.raises(FieldMappingError) as err:
        RowMapper(FieldMapping(outputs="response.text"), ["resp", "text"])
    assert "'response.text'" in err.value.message


# --------------------------------------------------------------------------- missing columns


@pytest.mark.parametrize(
    ("mapping", "entry", "column"),
    [
        (FieldMapping(outputs="model_expression"), "outputs", "model_expression"),
        (FieldMapping(trace="steps"), "trace", "steps"),
        (FieldMapping(app_params="cfg"), "app_params", "cfg"),
        (FieldMapping(inputs=["question", "nope"]), "inputs", "nope"),
        (FieldMapping(outputs="answer.text"), "outputs", "answer.text"),
    ],
)
def test_missing_column_is_a_field_mapping_error(mapping: FieldMapping, entry: str, column: str) -> None:
    columns = ["question", "output", "reference"]
    with pytest.raises(FieldMappingError) as err:
        RowMapper(mapping, columns)
    message = err.value.message
    assert f"field_mapping.{entry}" in message
    assert repr(column) in message
    for name in columns:
        assert repr(name) in message
    assert str(err.value) == message
    assert isinstance(err.value, DefinitionError)
    assert err.value.type_name == "FieldMappingError"


def test_missing_column_message_lists_columns_in_order() -> None:
    with pytest.raises(FieldMappingError) as err:
        RowMapper(FieldMapping(outputs="x"), ["b", "a", "c"])
    assert err.value.message.endswith("its columns: 'b', 'a', 'c'")


def test_missing_column_when_the_dataset_has_no_columns() -> None:
    with pytest.raises(FieldMappingError) as err:
        RowMapper(FieldMapping(outputs="x"), [])
    assert "field_mapping.outputs" in err.value.message
    assert "none" in err.value.message


def test_missing_column_message_is_bounded_for_wide_datasets() -> None:
    columns = [f"col{i}" for i in range(200)]
    with pytest.raises(FieldMappingError) as err:
        RowMapper(FieldMapping(outputs="x"), columns)
    message = err.value.message
    assert "'col0'" in message and "'col49'" in message
    assert "'col50'" not in message and "'col199'" not in message
    assert message.endswith("…")


def test_first_bad_entry_reported_for_inputs() -> None:
    with pytest.raises(FieldMappingError) as err:
        RowMapper(FieldMapping(inputs=["a", "missing1", "missing2"]), ["a"])
    assert "'missing1'" in err.value.message


# --------------------------------------------------------------------------- warnings


def test_warning_when_nothing_supplies_outputs() -> None:
    mapper = RowMapper(DEFAULT, ["question", "answer"])
    assert len(mapper.warnings) == 1
    assert "outputs" in mapper.warnings[0]
    assert "field_mapping.outputs" in mapper.warnings[0]
    assert mapper.case({"question": "q", "answer": "a"})["outputs"] is None


@pytest.mark.parametrize(
    ("mapping", "columns"),
    [
        (DEFAULT, ["question", "outputs"]),
        (DEFAULT, ["question", "output"]),
        (DEFAULT, ["output", "outputs"]),
        (FieldMapping(outputs="answer"), ["question", "answer"]),
        (FieldMapping(outputs="answer.text"), ["answer"]),
        (DEFAULT, []),
        (FieldMapping(inputs=[]), []),
    ],
)
def test_no_warning(mapping: FieldMapping, columns: list[str]) -> None:
    assert RowMapper(mapping, columns).warnings == []


def test_warning_ignores_other_mappings() -> None:
    mapper = RowMapper(FieldMapping(trace="t", inputs=["q"], app_params="p"), ["q", "t", "p"])
    assert len(mapper.warnings) == 1


def test_mapper_is_reusable_across_rows() -> None:
    mapper = RowMapper(FieldMapping(outputs="r.text", inputs=["q"]), ["q", "r"])
    rows = [{"q": i, "r": {"text": f"t{i}"}} for i in range(5)]
    assert [mapper.case(row) for row in rows] == [
        {"inputs": {"q": i}, "outputs": f"t{i}", "trace": None, "app_params": None} for i in range(5)
    ]
