"""Rule ``signature-prologue`` (the default): ``evaluate(inputs, outputs, trace)`` + a prologue.

The signature becomes ``(inputs, outputs, trace)``, keeping the annotations of the legacy
``inputs`` and ``output`` parameters (and the list's layout: line breaks, trailing comma). Right
after the docstring, a prologue rebinds the legacy names the body uses, so the body stays byte
for byte what it was, and nested functions that reuse those names are unaffected::

    app_params = {}
    output = outputs
    correct_answer = inputs.get("correct_answer") if isinstance(inputs, dict) else None

``correct_answer`` is exactly what this service passed the legacy revision (the
``correct_answer_key`` setting's value, null when the key or a dict is missing). Only the names
the body reads (libcst scope analysis) are rebound; ``app_params`` always comes with a
``TODO[evaluator-migrate]`` comment, since its values must now come from elsewhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import libcst as cst

from evaluator_host.migration.base import TODO

__all__ = ["APP_PARAMS_TODO", "Prologue", "correct_answer_expr", "prologue"]

APP_PARAMS_TODO = (
    f"# {TODO}: v2 has no app_params (Agenta always passed {{}}); read these values from inputs or settings"
)


def correct_answer_expr(key: str) -> str:
    """What the legacy harness passed as ``correct_answer``."""
    return f"inputs.get({json.dumps(key)}) if isinstance(inputs, dict) else None"


@dataclass(frozen=True)
class Prologue:
    """The legacy names, their annotations, and which of them the body reads."""

    names: list[str]
    annotations: list[cst.Annotation | None]
    read: list[bool]
    correct_answer_key: str


def _line(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text + "\n")


def _binding(name: str, annotation: cst.Annotation | None, value: str, comment: str = "") -> cst.BaseStatement:
    ann = "" if annotation is None else ": " + cst.Module([]).code_for_node(annotation.annotation)
    return _line(f"{name}{ann} = {value}{'  ' + comment if comment else ''}")


def prologue(spec: Prologue) -> list[cst.BaseStatement]:
    """The statements rebinding the legacy names the body reads (a name nothing reads is not bound:
    it would only be an unused variable)."""
    app, inputs, output, correct = spec.names
    lines = []
    if spec.read[0]:
        lines.append(_binding(app, spec.annotations[0], "{}", APP_PARAMS_TODO))
    if inputs != "inputs" and spec.read[1]:
        lines.append(_binding(inputs, None, "inputs"))
    if output != "outputs" and spec.read[2]:
        lines.append(_binding(output, None, "outputs"))
    if spec.read[3]:
        lines.append(_binding(correct, spec.annotations[3], correct_answer_expr(spec.correct_answer_key)))
    return lines


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def _new_params(params: cst.Parameters) -> cst.Parameters:
    old = list(params.params)
    return params.with_changes(
        params=[
            old[1].with_changes(name=cst.Name("inputs"), default=None, equal=cst.MaybeSentinel.DEFAULT),
            old[2].with_changes(name=cst.Name("outputs"), default=None, equal=cst.MaybeSentinel.DEFAULT),
            old[3].with_changes(name=cst.Name("trace"), annotation=None, default=None, equal=cst.MaybeSentinel.DEFAULT),
        ]
    )


def rewrite(fn: cst.FunctionDef, spec: Prologue) -> cst.FunctionDef:
    """``fn`` with the v2 signature and the prologue after its docstring."""
    lines = prologue(spec)
    body = fn.body
    if isinstance(body, cst.SimpleStatementSuite):  # `def evaluate(...): return x` on one line
        statements: list[cst.BaseStatement] = [*lines, cst.SimpleStatementLine(body=body.body)]
        new_body: cst.BaseSuite = cst.IndentedBlock(body=statements, header=body.trailing_whitespace)
    else:
        assert isinstance(body, cst.IndentedBlock)
        old = list(body.body)
        at = 1 if old and _is_docstring(old[0]) else 0
        new_body = body.with_changes(body=[*old[:at], *lines, *old[at:]])
    return fn.with_changes(params=_new_params(fn.params), body=new_body)
