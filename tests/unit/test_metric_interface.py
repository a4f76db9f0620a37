"""The ``metric`` interface's detection (a NeMo ``Metric`` class, Python only) and the built-in
``nemo_evaluator_sdk`` (runtimes/python/protocols/) against pydantic's own coercion, which the real
package's value kinds (``RootModel[bool | float | int | str]``) use."""

from __future__ import annotations

import importlib.util
import math
from types import ModuleType
from typing import Any

import pydantic
import pytest

from evaluator_host.definitions import languages
from evaluator_host.definitions.interfaces import choose, detect_python
from evaluator_host.errors import InterfaceError
from tests.support.nemo import TUTORIAL_METRIC


def _builtin() -> ModuleType:
    path = languages.RUNTIMES_DIR / "python" / "protocols" / "nemo_evaluator_sdk" / "__init__.py"
    spec = importlib.util.spec_from_file_location("builtin_nemo_evaluator_sdk", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SDK = _builtin()


def test_the_tutorial_metric_is_detected() -> None:
    found = detect_python("python", TUTORIAL_METRIC)
    assert (found.interface, found.entrypoint, found.is_async) == (
        "metric",
        "ArithmeticExpressionCorrectnessMetric",
        True,
    )
    assert found.line == TUTORIAL_METRIC.splitlines().index("class ArithmeticExpressionCorrectnessMetric(Metric):") + 1


@pytest.mark.parametrize(
    ("code", "is_async"),
    [
        ("class M:\n    type = 't'\n    def output_spec(self): ...\n    def compute_scores(self, i): ...\n", False),
        (
            "class M:\n    @property\n    def type(self): return 't'\n    def output_spec(self): ...\n"
            "    async def compute_scores(self, i): ...\n",
            True,
        ),
        (
            "class M:\n    type: str = 't'\n    def output_spec(self): ...\n"
            "    async def compute_scores(self, i): ...\n",
            True,
        ),
    ],
)
def test_a_metric_class_is_found_by_its_three_names_not_its_base(code: str, is_async: bool) -> None:
    found = detect_python("python", code)
    assert (found.interface, found.entrypoint, found.is_async) == ("metric", "M", is_async)


def test_an_evaluate_function_wins_and_a_class_missing_a_name_is_no_metric() -> None:
    both = "def evaluate(inputs, outputs, trace):\n    return 1\n" + TUTORIAL_METRIC
    assert detect_python("python", both).interface == "evaluate"
    with pytest.raises(InterfaceError, match="nor a Metric class"):
        detect_python("python", "class M:\n    type = 't'\n    def output_spec(self): ...\n")


def test_several_metric_classes_are_chosen_by_settings_entrypoint() -> None:
    one = "class {n}:\n    type = '{n}'\n    def output_spec(self): ...\n    async def compute_scores(self, i): ...\n"
    code = one.format(n="A") + "\n" + one.format(n="B").replace("async ", "")
    found = detect_python("python", code)
    assert found.interface == "metric" and found.entrypoint == "" and set(found.loader["classes"]) == {"A", "B"}
    with pytest.raises(InterfaceError, match=r"several metric classes \(A, B\)"):
        choose(found, None)
    chosen = choose(found, "B")
    assert (chosen.entrypoint, chosen.is_async, chosen.line) == ("B", False, 6)
    with pytest.raises(InterfaceError, match="'C' is not a metric class"):
        choose(found, "C")
    with pytest.raises(InterfaceError, match="only metric class is 'A'"):
        choose(detect_python("python", one.format(n="A")), "B")
    with pytest.raises(InterfaceError, match="settings.entrypoint names a metric class"):
        choose(detect_python("python", "def evaluate(inputs, outputs, trace):\n    return 1\n"), "A")


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_a_js_or_ts_metric_class_says_python_only(language: str) -> None:
    code = "export class M {\n  output_spec() { return []; }\n  async compute_scores(i) { return {}; }\n}\n"
    with pytest.raises(InterfaceError, match="Python only"):
        languages.get(language).detect(code)
    with pytest.raises(InterfaceError, match="no evaluate\\(\\) or main\\(\\)"):  # any other class: the usual answer
        languages.get(language).detect("export class M {}\n")


# -- the built-in types ------------------------------------------------------------------------

VALUES: list[Any] = [
    True, False, 0, 1, 2, -1, 0.0, 1.0, 0.5, 2.0, float("nan"), float("inf"),
    "true", "False", "yes", "no", "on", "off", "t", "f", "y", "n", "1", "0", "0.5", " 3 ", "abc", "",
    None, [], {}, [1],
]  # fmt: skip

KINDS = {"BooleanValue": bool, "ContinuousScore": float, "DiscreteScore": int, "Label": str}


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_value_kind_coerces_as_pydantic_does(kind: str, value: Any) -> None:
    real = pydantic.RootModel[KINDS[kind]]  # type: ignore[valid-type]
    try:
        expected: Any = real.model_validate(value).root
    except pydantic.ValidationError:
        expected = pydantic.ValidationError
    try:
        got: Any = getattr(SDK, kind).model_validate(value).root
    except ValueError:
        got = pydantic.ValidationError
    assert _same(got, expected) and type(got) is type(expected), (value, got, expected)


def test_the_built_in_types_construct_and_validate_as_the_real_ones() -> None:
    spec = SDK.MetricOutputSpec.boolean("ok", "is it ok")
    assert (spec.name, spec.description, spec.value_schema, spec.required) == ("ok", "is it ok", SDK.BooleanValue, True)
    assert SDK.MetricOutputSpec.continuous_score("s", required=False).required is False
    assert spec.coerce_value("yes").root is True
    with pytest.raises(ValueError, match="must not be empty"):
        SDK.MetricOutputSpec.label("")
    metric_input = SDK.MetricInput(
        row=SDK.DatasetRow(data={"expected": 1}), candidate=SDK.CandidateOutput(output_text="1", metadata={"m": 1})
    )
    assert metric_input.row.data == {"expected": 1} and metric_input.row.row_index is None
    assert metric_input.candidate.as_sample() == {"m": 1, "output_text": "1"}
    with pytest.raises(TypeError):
        SDK.MetricOutput("ok", True)  # keywords only, as pydantic models
    result = SDK.MetricResult(outputs=[SDK.MetricOutput(name="ok", value=True)])
    assert result.diagnostics == [] and result.model_dump() == {
        "outputs": [{"name": "ok", "value": True}],
        "diagnostics": [],
    }
    assert SDK.validate_metric_result(result, [spec]) is result
    for outputs, message in [
        ([], r"Missing required metric outputs: \['ok'\]"),
        (
            [SDK.MetricOutput(name="ok", value=True), SDK.MetricOutput(name="x", value=1)],
            r"Undeclared metric outputs: \['x'\]",
        ),
        ([SDK.MetricOutput(name="ok", value=True)] * 2, r"Duplicate metric output names: \['ok'\]"),
        ([SDK.MetricOutput(name="ok", value="maybe")], "not a valid boolean"),
    ]:
        with pytest.raises(ValueError, match=message):
            SDK.validate_metric_result(SDK.MetricResult(outputs=outputs), [spec])
