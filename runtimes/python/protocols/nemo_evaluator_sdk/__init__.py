"""The built-in ``nemo_evaluator_sdk``: the five metric protocol types of NeMo Evaluator's SDK (and the
few they use), so a NeMo metric class runs unchanged without pinning anything.

The harness puts this folder on ``sys.path`` *after* the runtime's package folders: when the evaluator
pins ``nemo-platform`` (whose wheel ships the real ``nemo_evaluator_sdk``), the real package is found
first and this module is never imported. Standard library only; no pydantic.

What it covers (docs/metrics.md): ``Metric`` (a base class: ``type``, ``output_spec()``,
``compute_scores(input)``), ``MetricInput`` (``row``, ``candidate``), ``DatasetRow`` (``data``,
``row_index``), ``CandidateOutput`` (``output_text``, ``response``, ``trajectory``, ``metadata``),
``MetricOutputSpec`` (``name``, ``description``, ``value_schema``, ``required`` and the constructors
``continuous_score``, ``discrete_score``, ``label``, ``boolean``), ``MetricOutput`` (``name``,
``value``), ``MetricResult`` (``outputs``, ``diagnostics``), ``MetricDiagnostic`` (``message``,
``details``), the value kinds ``ContinuousScore``, ``DiscreteScore``, ``Label``, ``BooleanValue`` and
``validate_metric_result``. Constructors take keywords as the real (pydantic) models do; a value is
coerced to its output's kind as pydantic's lax mode does (``"yes"`` and ``1`` are ``True``, ``"0.5"`` is
``0.5``), anything else is refused. Not covered (pin ``nemo-platform`` for them): the built-in metrics
(``ExactMatchMetric``, ``LLMJudgeMetric`` …), ``Evaluator``, ``FieldMapping``, ``RunConfig``, model
and secret resolution, ``MetricOutputSpec.model`` with a pydantic schema, evidence.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "BooleanValue",
    "CandidateOutput",
    "ContinuousScore",
    "DatasetRow",
    "DiscreteScore",
    "Label",
    "Metric",
    "MetricDiagnostic",
    "MetricInput",
    "MetricOutput",
    "MetricOutputSpec",
    "MetricResult",
    "validate_metric_result",
    "version",
]

version = "builtin (evaluator-host)"  # the real package's `version` is its distribution's version
BUILTIN = True  # the real package has no such name: how a reader tells the two apart

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class _Value:
    """A value kind (the real package's pydantic ``RootModel``): ``model_validate`` coerces or raises."""

    kind = "value"

    def __init__(self, root: Any) -> None:
        self.root = type(self).coerce(root)

    @classmethod
    def model_validate(cls, value: Any) -> _Value:
        return cls(value)

    @classmethod
    def coerce(cls, value: Any) -> Any:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.root == self.root  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={self.root!r})"


def _refuse(kind: str, value: Any) -> ValueError:
    return ValueError(f"{value!r} ({type(value).__name__}) is not a valid {kind}")


class ContinuousScore(_Value):
    """A continuous number (float)."""

    kind = "continuous score (a number)"

    @classmethod
    def coerce(cls, value: Any) -> float:
        if isinstance(value, bool | int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise _refuse(cls.kind, value)


class DiscreteScore(_Value):
    """A whole number (int)."""

    kind = "discrete score (a whole number)"

    @classmethod
    def coerce(cls, value: Any) -> int:
        if isinstance(value, bool | int):
            return int(value)
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise _refuse(cls.kind, value)


class Label(_Value):
    """A string label."""

    kind = "label (a string)"

    @classmethod
    def coerce(cls, value: Any) -> str:
        if isinstance(value, str):
            return value
        raise _refuse(cls.kind, value)


class BooleanValue(_Value):
    """A boolean."""

    kind = "boolean"

    @classmethod
    def coerce(cls, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _refuse(cls.kind, value)


class _Model:
    """Keyword construction, equality and repr of the fields (a small stand-in for a pydantic model)."""

    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, f) == getattr(other, f) for f in self._fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self._fields)})"

    def model_dump(self) -> dict[str, Any]:
        def dump(value: Any) -> Any:
            if isinstance(value, _Model):
                return value.model_dump()
            if isinstance(value, list):
                return [dump(v) for v in value]
            return value

        return {f: dump(getattr(self, f)) for f in self._fields}


class DatasetRow(_Model):
    """The dataset row (``data``: every column) and its index."""

    _fields = ("row_index", "data")

    def __init__(self, *, data: dict[str, Any], row_index: int | None = None) -> None:
        if not isinstance(data, dict):
            raise TypeError("DatasetRow.data must be a dict")
        self.data = data
        self.row_index = row_index


class CandidateOutput(_Model):
    """The output being scored: ``output_text``, the raw ``response``, a ``trajectory``, ``metadata``."""

    _fields = ("output_text", "response", "trajectory", "metadata")

    def __init__(
        self,
        *,
        output_text: str | None = None,
        response: Any = None,
        trajectory: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if output_text is not None and not isinstance(output_text, str):
            raise TypeError("CandidateOutput.output_text must be a string or None")
        self.output_text = output_text
        self.response = response
        self.trajectory = trajectory
        self.metadata = dict(metadata or {})
        self.evidence = None

    def as_sample(self) -> dict[str, Any]:
        """The sample-shaped payload of template helpers: metadata plus the fields that are set."""
        sample = dict(self.metadata)
        for name in ("output_text", "response", "trajectory"):
            if getattr(self, name) is not None:
                sample[name] = getattr(self, name)
        return sample


class MetricInput(_Model):
    """One row's scoring input: ``row`` and ``candidate``."""

    _fields = ("row", "candidate")

    def __init__(self, *, row: DatasetRow, candidate: CandidateOutput) -> None:
        self.row = row
        self.candidate = candidate


class MetricOutputSpec(_Model):
    """One declared output: its name, its value kind (``value_schema``), whether it is required."""

    _fields = ("name", "description", "value_schema", "required")

    def __init__(
        self, *, name: str, value_schema: type[_Value], description: str | None = None, required: bool = True
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("metric output name must not be empty")
        self.name = name
        self.description = description
        self.value_schema = value_schema
        self.required = required

    @staticmethod
    def continuous_score(name: str, description: str | None = None, *, required: bool = True) -> MetricOutputSpec:
        return MetricOutputSpec(name=name, description=description, value_schema=ContinuousScore, required=required)

    @staticmethod
    def discrete_score(name: str, description: str | None = None, *, required: bool = True) -> MetricOutputSpec:
        return MetricOutputSpec(name=name, description=description, value_schema=DiscreteScore, required=required)

    @staticmethod
    def label(name: str, description: str | None = None, *, required: bool = True) -> MetricOutputSpec:
        return MetricOutputSpec(name=name, description=description, value_schema=Label, required=required)

    @staticmethod
    def boolean(name: str, description: str | None = None, *, required: bool = True) -> MetricOutputSpec:
        return MetricOutputSpec(name=name, description=description, value_schema=BooleanValue, required=required)

    def coerce_value(self, value: Any) -> _Value:
        """``value`` as this output's kind (``ValueError`` when it is not one)."""
        return self.value_schema.model_validate(value)

    def coerce_output(self, output: MetricOutput) -> _Value:
        if output.name != self.name:
            raise ValueError(f"Expected metric output {self.name!r}, got {output.name!r}")
        return self.coerce_value(output.value)


class MetricOutput(_Model):
    """One named value a metric emits."""

    _fields = ("name", "value")

    def __init__(self, *, name: str, value: Any) -> None:
        if not isinstance(name, str):
            raise TypeError("MetricOutput.name must be a string")
        self.name = name
        self.value = value


class MetricDiagnostic(_Model):
    """How a score was derived: a ``message`` and optional structured ``details``."""

    _fields = ("message", "details")

    def __init__(self, *, message: str, details: dict[str, Any] | None = None) -> None:
        self.message = message
        self.details = details


class MetricResult(_Model):
    """One row's result: its ``outputs`` and optional ``diagnostics``."""

    _fields = ("outputs", "diagnostics")

    def __init__(self, *, outputs: list[MetricOutput], diagnostics: list[MetricDiagnostic] | None = None) -> None:
        self.outputs = list(outputs)
        self.diagnostics = list(diagnostics or [])


class Metric:
    """The metric protocol as a base class: set ``type``, define ``output_spec()`` and
    ``compute_scores(input)`` (async or not)."""

    type: str

    def output_spec(self) -> list[MetricOutputSpec]:
        raise NotImplementedError("a Metric defines output_spec()")

    async def compute_scores(self, input: MetricInput) -> MetricResult:  # noqa: A002 - the protocol's name
        raise NotImplementedError("a Metric defines compute_scores()")


def validate_metric_result(result: MetricResult, outputs: list[MetricOutputSpec]) -> MetricResult:
    """``result`` checked against the declared ``outputs`` (``ValueError`` naming what is wrong), as the
    real package checks it: no duplicate, no missing required output, no undeclared one, each value of
    its kind."""
    returned = [output.name for output in result.outputs]
    duplicates = sorted({name for name in returned if returned.count(name) > 1})
    if duplicates:
        raise ValueError(f"Duplicate metric output names: {duplicates}")
    declared = {spec.name: spec for spec in outputs}
    missing = [spec.name for spec in outputs if spec.required and spec.name not in returned]
    undeclared = [name for name in returned if name not in declared]
    if missing:
        raise ValueError(f"Missing required metric outputs: {missing}")
    if undeclared:
        raise ValueError(f"Undeclared metric outputs: {undeclared}")
    for output in result.outputs:
        declared[output.name].coerce_output(output)
    return result
