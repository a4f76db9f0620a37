"""Rule ``adapter`` (the fallback): keep the legacy function whole, add a v2 ``evaluate`` calling it.

Used where rewriting the signature in place is not safe (see
:func:`evaluator_host.migration.python.entry.adapter_reason`): decorators, ``*args``/``**kwargs``,
positional-only or keyword-only parameters, legacy names that clash with the new ones, bodies
reading module-level ``inputs``/``outputs``/``trace`` or calling ``locals()``, assigned lambdas.
The legacy function is renamed (``_evaluate_v1``, or a free variant) and, right after it::

    def evaluate(inputs, outputs, trace):
        \"\"\"...\"\"\"
        return _evaluate_v1({}, inputs, outputs, inputs.get("correct_answer") if isinstance(inputs, dict) else None)
"""

from __future__ import annotations

import libcst as cst

from evaluator_host.migration.python.prologue import APP_PARAMS_TODO, correct_answer_expr

__all__ = ["adapter_function", "rename"]

_DOC = '"""The v2 entrypoint (added by evaluator-host migrate): calls the legacy evaluator above."""'


def adapter_function(
    legacy: str, *, key: str, is_async: bool, app_params_todo: bool, score_helper: str | None
) -> cst.FunctionDef:
    """``def evaluate(inputs, outputs, trace)`` calling ``legacy`` as the legacy harness did."""
    call = f"{legacy}({{}}, inputs, outputs, {correct_answer_expr(key)})"
    if is_async:
        call = f"await {call}"
    if score_helper is not None:
        call = f"{score_helper}({call})"
    todo = f"\n    {APP_PARAMS_TODO}" if app_params_todo else ""
    head = f"{'async ' if is_async else ''}def evaluate(inputs, outputs, trace):"
    source = f"{head}\n    {_DOC}{todo}\n    return {call}\n"
    fn = cst.parse_statement(source)
    assert isinstance(fn, cst.FunctionDef)
    return fn.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def rename(statement: cst.FunctionDef | cst.SimpleStatementLine, legacy: str) -> cst.BaseStatement:
    """The legacy definition bound to ``legacy`` instead of ``evaluate``."""
    if isinstance(statement, cst.FunctionDef):
        return statement.with_changes(name=cst.Name(legacy))
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign)
    target = assign.targets[0].with_changes(target=cst.Name(legacy))
    return statement.with_changes(body=[assign.with_changes(targets=[target])])
