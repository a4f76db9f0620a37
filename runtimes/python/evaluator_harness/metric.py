"""The ``metric`` interface: a NeMo Evaluator ``Metric`` class run as written (docs/metrics.md).

At load the class the host named (``entrypoint``) is instantiated once and its ``output_spec()`` read
once. Each case calls ``compute_scores(MetricInput)`` on that one instance: ``row.data`` is the case's
``inputs`` (a job's whole row; a non-object ``inputs`` as ``{"inputs": value}``), ``candidate.output_text``
its ``outputs`` (a string as it is, null as None, anything else as its JSON text; the value itself is
``candidate.response``) and ``candidate.trajectory`` its ``trace``. The types are those of whichever
``nemo_evaluator_sdk`` imports: the pinned real package (``nemo-platform``), else the built-in one in
``../protocols`` (:func:`offer_builtin` puts it last on ``sys.path``).

The returned ``MetricResult`` is checked against ``output_spec()`` as NeMo checks it (no duplicate, no
missing required output, no undeclared one, each value of its declared kind, coerced as the spec's
``coerce_value`` does); a failure is :class:`InvalidOutput`, answered ``invalid_result`` naming the
output. A valid result becomes a dict of named outputs, which the host normalizes as any evaluator's
(``evaluation/outcomes/normalize.py``): each boolean or number under its NeMo name ``<type>.<output>`` and under
its plain name, a label (string) likewise in details (the first one also as ``label``), ``metric_type``,
and the diagnostics' messages as ``reason``. A NaN score (NeMo counts it in ``nan_count``) is left out
of the outputs and named in ``nan_outputs``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

PROTOCOLS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "protocols")


class InvalidOutput(Exception):
    """The metric's result breaks its ``output_spec()``: answered ``invalid_result``."""


def offer_builtin() -> None:
    """Make the built-in ``nemo_evaluator_sdk`` importable, after every package folder of the runtime
    (a pinned real package is found first)."""
    if PROTOCOLS_DIR not in sys.path:
        sys.path.append(PROTOCOLS_DIR)


def _kind(spec: Any) -> str:
    schema = getattr(spec, "value_schema", None)
    return getattr(schema, "__name__", "value")


class MetricAdapter:
    """One instance of the user's metric class, called per case like an ``evaluate`` function."""

    def __init__(self, cls: Any) -> None:
        if not isinstance(cls, type):
            raise TypeError(f"{cls!r} is not a class")
        self.instance = cls()
        self.type = self.instance.type
        if not isinstance(self.type, str) or not self.type:
            raise TypeError(f"{cls.__name__}.type must be a non-empty string, not {self.type!r}")
        specs = self.instance.output_spec()
        if not isinstance(specs, list | tuple) or not specs:
            raise TypeError(f"{cls.__name__}.output_spec() must return a non-empty list of MetricOutputSpec")
        names = [getattr(spec, "name", None) for spec in specs]
        if not all(isinstance(name, str) and name for name in names):
            raise TypeError(f"{cls.__name__}.output_spec(): every MetricOutputSpec needs a name")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TypeError(f"{cls.__name__}.output_spec(): duplicate metric output names: {duplicates}")
        self.specs: dict[str, Any] = dict(zip(names, specs, strict=True))
        import importlib

        # by name, at run time: the pinned real package, or the built-in one (offer_builtin)
        self.sdk = importlib.import_module("nemo_evaluator_sdk")

    def __call__(self, inputs: Any, outputs: Any, trace: Any) -> Any:
        sdk = self.sdk
        if outputs is None or isinstance(outputs, str):
            text = outputs
        else:
            text = json.dumps(outputs, ensure_ascii=False, default=str)
        metric_input = sdk.MetricInput(
            row=sdk.DatasetRow(data=inputs if isinstance(inputs, dict) else {"inputs": inputs}),
            candidate=sdk.CandidateOutput(output_text=text, response=outputs, trajectory=trace),
        )
        value = self.instance.compute_scores(metric_input)
        if hasattr(value, "__await__"):
            return self._settle(value)
        return self.result(value)

    async def _settle(self, awaitable: Any) -> dict[str, Any]:
        return self.result(await awaitable)

    def result(self, result: Any) -> dict[str, Any]:
        """``result`` checked against the output spec, as the dict of named outputs the host normalizes."""
        outputs = getattr(result, "outputs", None)
        if not isinstance(outputs, list | tuple):
            raise InvalidOutput(
                f"{self.type}: compute_scores returned {type(result).__name__}, not a MetricResult(outputs=[...])"
            )
        values: dict[str, Any] = {}
        for output in outputs:
            name = getattr(output, "name", None)
            if not isinstance(name, str):
                raise InvalidOutput(f"{self.type}: an output is {type(output).__name__}, not a MetricOutput")
            if name in values:
                raise InvalidOutput(f"{self.type}: output {name!r} is emitted twice")
            if name not in self.specs:
                declared = ", ".join(repr(n) for n in self.specs)
                raise InvalidOutput(f"{self.type}: output {name!r} is not declared by output_spec() ({declared})")
            spec = self.specs[name]
            try:
                coerced = spec.coerce_value(output.value)
            except Exception:  # noqa: BLE001 - pydantic's ValidationError or the built-in ValueError
                raise InvalidOutput(
                    f"{self.type}: output {name!r} is {output.value!r} ({type(output.value).__name__}), "
                    f"not a valid {_kind(spec)}"
                ) from None
            values[name] = getattr(coerced, "root", coerced)
        missing = [n for n, spec in self.specs.items() if getattr(spec, "required", True) and n not in values]
        if missing:
            raise InvalidOutput(f"{self.type}: required output {missing[0]!r} is missing (missing: {missing})")
        return self._named(values, getattr(result, "diagnostics", None) or [])

    def _named(self, values: dict[str, Any], diagnostics: list[Any]) -> dict[str, Any]:
        named: dict[str, Any] = {}
        nans: list[str] = []
        for name, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                nans.append(name)
                continue
            named[f"{self.type}.{name}"] = value
            named[name] = value
        labels = [v for n, v in values.items() if isinstance(v, str)]
        if labels and "label" not in named:  # a label output is the result's label (the first one)
            named["label"] = labels[0]
        named["metric_type"] = self.type
        if nans:
            named["nan_outputs"] = ", ".join(nans)
        messages = [str(getattr(d, "message", d)) for d in diagnostics]
        if messages:
            named["reason"] = "; ".join(messages)
        return named
