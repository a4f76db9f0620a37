"""NeMo Evaluator's tutorial metric ("Define and Run Custom Python Metrics") and its four-row dataset,
as the tutorial's text gives them: the code is pasted unchanged (its imports included), the rows keep
their columns and the model's answer is the ``model_expression`` column (NeMo's
``FieldMapping(output="model_expression")``; here a job's ``field_mapping: {"outputs": "model_expression"}``).

Expected: ``valid_expression`` 0.75 (the fourth answer is not an arithmetic expression) and
``correct_value`` 0.5 (the second evaluates to 150, not 200).
"""

from __future__ import annotations

from typing import Any

TUTORIAL_METRIC = """import ast
import math
import operator
from collections.abc import Callable

from nemo_evaluator_sdk import (
    Metric,
    MetricInput,
    MetricOutput,
    MetricOutputSpec,
    MetricResult,
)

MAX_EXPRESSION_CHARS = 256
MAX_AST_NODES = 64

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}

_UNARY_OPERATORS: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _validate_expression_size(expression: str, parsed: ast.AST) -> None:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError("expression is too long")

    if sum(1 for _ in ast.walk(parsed)) > MAX_AST_NODES:
        raise ValueError("expression is too complex")


def _evaluate_ast(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate_ast(node.body)

    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)

    if isinstance(node, ast.BinOp):
        operator_fn = _BINARY_OPERATORS.get(type(node.op))
        if operator_fn is None:
            raise ValueError(f"unsupported operator: {type(node.op).__name__}")
        return operator_fn(_evaluate_ast(node.left), _evaluate_ast(node.right))

    if isinstance(node, ast.UnaryOp):
        operator_fn = _UNARY_OPERATORS.get(type(node.op))
        if operator_fn is None:
            raise ValueError(f"unsupported unary operator: {type(node.op).__name__}")
        return operator_fn(_evaluate_ast(node.operand))

    raise ValueError(f"unsupported expression: {type(node).__name__}")


def safe_eval_math_expression(expression: str) -> float:
    expression = expression.strip()
    parsed = ast.parse(expression, mode="eval")
    _validate_expression_size(expression, parsed)
    return _evaluate_ast(parsed)


class ArithmeticExpressionCorrectnessMetric(Metric):
    type = "arithmetic-expression-correctness"

    def output_spec(self) -> list[MetricOutputSpec]:
        return [
            MetricOutputSpec.boolean("valid_expression"),
            MetricOutputSpec.boolean("correct_value"),
        ]

    async def compute_scores(self, metric_input: MetricInput) -> MetricResult:
        expression = metric_input.candidate.output_text
        if not expression:
            return MetricResult(
                outputs=[
                    MetricOutput(name="valid_expression", value=False),
                    MetricOutput(name="correct_value", value=False),
                ]
            )

        try:
            actual = safe_eval_math_expression(expression)
        except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError):
            return MetricResult(
                outputs=[
                    MetricOutput(name="valid_expression", value=False),
                    MetricOutput(name="correct_value", value=False),
                ]
            )

        expected = float(metric_input.row.data["expected"])
        tolerance = float(metric_input.row.data.get("tolerance", 1e-6))
        correct_value = math.isclose(actual, expected, rel_tol=tolerance, abs_tol=tolerance)

        return MetricResult(
            outputs=[
                MetricOutput(name="valid_expression", value=True),
                MetricOutput(name="correct_value", value=correct_value),
            ]
        )
"""

METRIC_TYPE = "arithmetic-expression-correctness"

DATASET: list[dict[str, Any]] = [
    {
        "question": "A box has 12 rows of pencils with 4 pencils in each row. Then 7 pencils are added. "
        "How many pencils are there?",
        "expected": 55,
        "tolerance": 1e-6,
        "model_expression": "(12 * 4) + 7",
    },
    {
        "question": "A server processed 125 requests, then processed 3 more batches of 25 requests. "
        "How many requests were processed?",
        "expected": 200,
        "tolerance": 1e-6,
        "model_expression": "125 + 25",
    },
    {
        "question": "A tank starts with 90 liters and loses 18 liters each hour for 3 hours. How many liters remain?",
        "expected": 36,
        "tolerance": 1e-6,
        "model_expression": "90 - (18 * 3)",
    },
    {
        "question": "A package contains 12 items and 4 packages are used. How many items are used?",
        "expected": 48,
        "tolerance": 1e-6,
        "model_expression": "__import__('os').system('echo nope')",
    },
]

# each row's (valid_expression, correct_value), as the tutorial's metric answers them
EXPECTED = [(True, True), (True, False), (True, True), (False, False)]


def cases() -> list[dict[str, Any]]:
    """The dataset as single-call cases: the row is ``inputs``, its ``model_expression`` ``outputs``."""
    return [{"inputs": row, "outputs": row["model_expression"]} for row in DATASET]
