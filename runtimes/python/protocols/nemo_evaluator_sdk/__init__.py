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
        if not isinstance(self, _Value) or type(other) is not type(self):
            return NotImplemented
        return bool(_own(self)["root"] == _own(other)["root"])

    def __repr__(self) -> str:
        if not isinstance(self, _Value):
            raise TypeError("not a value kind")
        return f"{type(self).__name__}(root={_own(self)['root']!r})"


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


def _own(obj: Any) -> dict[str, Any]:
    """The instance dictionary of ``obj`` itself (``object.__getattribute__``, never a lookup a class,
    a descriptor or a copied ``__dict__`` can redirect); its values are what ``__init__`` or the
    object's own code stored."""
    own: dict[str, Any] = object.__getattribute__(obj, "__dict__")
    return own


# The field names of each model, by class: fixed here, never read from an instance or a class attribute a
# subclass (or a ``functools.update_wrapper`` that copied a ``__dict__``) could set (issue 47).
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type, *names: str) -> None:
    _FIELDS[cls] = names


def _checked(obj: Any, cls: type) -> Any:
    if not isinstance(obj, cls):
        raise TypeError(f"{type(obj).__name__} is not a {cls.__name__}")
    return obj


class _Model:
    """Keyword construction, equality and repr of the fields (a small stand-in for a pydantic model).

    Written for the restricted policy: a model's methods work on models only (``TypeError`` for anything
    else), take the field names from :data:`_FIELDS` by the model's class and the values from the
    instance's own dictionary — never ``getattr`` with a name that is not fixed here — so calling them on
    an object the caller chose reads nothing that caller could not read itself."""

    def _values(self) -> list[tuple[str, Any]]:
        names = next((_FIELDS[cls] for cls in type(self).__mro__ if cls in _FIELDS), None)
        if names is None or not isinstance(self, _Model):
            raise TypeError(f"{type(self).__name__} is not a nemo_evaluator_sdk model")
        own = _own(self)
        return [(name, own.get(name)) for name in names]

    def __eq__(self, other: object) -> bool:
        if not isinstance(self, _Model) or type(other) is not type(self):
            return NotImplemented
        pairs = zip(_Model._values(self), _Model._values(other), strict=True)  # type: ignore[arg-type]
        return all(a == b for (_n, a), (_m, b) in pairs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in _Model._values(self))})"

    def model_dump(self) -> dict[str, Any]:
        def dump(value: Any) -> Any:
            if isinstance(value, _Model):
                return _Model.model_dump(value)
            if type(value) is list:
                return [dump(v) for v in value]
            return value

        return {name: dump(value) for name, value in _Model._values(self)}


class DatasetRow(_Model):
    """The dataset row (``data``: every column) and its index."""

    def __init__(self, *, data: dict[str, Any], row_index: int | None = None) -> None:
        if not isinstance(data, dict):
            raise TypeError("DatasetRow.data must be a dict")
        self.data = data
        self.row_index = row_index


_fields(DatasetRow, *("row_index", "data"))


class CandidateOutput(_Model):
    """The output being scored: ``output_text``, the raw ``response``, a ``trajectory``, ``metadata``."""

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
        values = dict(_Model._values(_checked(self, CandidateOutput)))
        sample = dict(values["metadata"] or {})
        for name in ("output_text", "response", "trajectory"):
            if values[name] is not None:
                sample[name] = values[name]
        return sample


_fields(CandidateOutput, *("output_text", "response", "trajectory", "metadata"))


class MetricInput(_Model):
    """One row's scoring input: ``row`` and ``candidate``."""

    def __init__(self, *, row: DatasetRow, candidate: CandidateOutput) -> None:
        self.row = row
        self.candidate = candidate


_fields(MetricInput, *("row", "candidate"))


class MetricOutputSpec(_Model):
    """One declared output: its name, its value kind (``value_schema``), whether it is required."""

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
        schema = dict(_Model._values(_checked(self, MetricOutputSpec)))["value_schema"]
        return schema.model_validate(value)  # type: ignore[no-any-return]

    def coerce_output(self, output: MetricOutput) -> _Value:
        _checked(self, MetricOutputSpec)
        _checked(output, MetricOutput)
        if output.name != self.name:
            raise ValueError(f"Expected metric output {self.name!r}, got {output.name!r}")
        return self.coerce_value(output.value)


_fields(MetricOutputSpec, *("name", "description", "value_schema", "required"))


class MetricOutput(_Model):
    """One named value a metric emits."""

    def __init__(self, *, name: str, value: Any) -> None:
        if not isinstance(name, str):
            raise TypeError("MetricOutput.name must be a string")
        self.name = name
        self.value = value


_fields(MetricOutput, *("name", "value"))


class MetricDiagnostic(_Model):
    """How a score was derived: a ``message`` and optional structured ``details``."""

    def __init__(self, *, message: str, details: dict[str, Any] | None = None) -> None:
        self.message = message
        self.details = details


_fields(MetricDiagnostic, *("message", "details"))


class MetricResult(_Model):
    """One row's result: its ``outputs`` and optional ``diagnostics``."""

    def __init__(self, *, outputs: list[MetricOutput], diagnostics: list[MetricDiagnostic] | None = None) -> None:
        self.outputs = list(outputs)
        self.diagnostics = list(diagnostics or [])


_fields(MetricResult, *("outputs", "diagnostics"))


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
