"""evaluator_host.definitions.interfaces: entrypoint detection from Python source."""

from __future__ import annotations

import pytest

from evaluator_host.definitions.interfaces import ACCEPTED_SIGNATURES, detect
from evaluator_host.errors import CodeSyntaxError, DefinitionError, InterfaceError


def test_accepted_signatures_show_all_three_interfaces() -> None:
    assert "evaluate(inputs, outputs, trace)" in ACCEPTED_SIGNATURES
    assert "evaluate(app_params, inputs, output, correct_answer)" in ACCEPTED_SIGNATURES
    assert "main(" in ACCEPTED_SIGNATURES


# --- evaluate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "def evaluate(inputs, outputs, trace):\n    return 1.0\n",
        "async def evaluate(inputs, outputs, trace):\n    return 1.0\n",
        "def evaluate(a, b, c):\n    return 1.0\n",
        "def evaluate(inputs, outputs, trace=None):\n    return 1.0\n",
        "def evaluate(inputs, outputs, trace, **kwargs):\n    return 1.0\n",
        "def evaluate(inputs, outputs, trace, *, extra=1):\n    return 1.0\n",
        "def evaluate(inputs, /, outputs, trace):\n    return 1.0\n",
        "def evaluate(inputs: dict, outputs: str, trace: object) -> float:\n    return 1.0\n",
    ],
)
def test_evaluate_interface(code: str) -> None:
    detected = detect("python", code)
    assert detected.interface == "evaluate"
    assert detected.entrypoint == "evaluate"
    assert detected.line == 1


def test_entrypoint_line_is_reported() -> None:
    code = "import math\n\n\ndef helper():\n    return 1\n\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
    assert detect("python", code).line == 8


def test_decorated_entrypoint_is_found() -> None:
    code = "import functools\n\n@functools.lru_cache\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
    assert detect("python", code).interface == "evaluate"


def test_helpers_and_nested_definitions_are_ignored() -> None:
    code = (
        "class Judge:\n"
        "    def main(self):\n"
        "        return 0\n"
        "def outer():\n"
        "    def main():\n"
        "        return 0\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    def evaluate(x):\n"
        "        return x\n"
        "    return evaluate(1.0)\n"
    )
    detected = detect("python", code)
    assert detected.interface == "evaluate"
    assert detected.line == 7


# --- legacy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n",
        "async def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n",
        "def evaluate(app_params, inputs, output, correct_answer=None):\n    return 1.0\n",
        "def evaluate(a, b, c, d):\n    return '0.5'\n",
    ],
)
def test_legacy_interface(code: str) -> None:
    detected = detect("python", code)
    assert detected.interface == "legacy"
    assert detected.entrypoint == "evaluate"


# --- main ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "def main():\n    return {'score': 1}\n",
        "def main(inputs, outputs):\n    return {'score': 1}\n",
        "def main(question, output, trace, completion):\n    return {'score': 1}\n",
        "def main(a, b, c, d, e, f):\n    return {'score': 1}\n",
        "def main(inputs, missing=None):\n    return {'score': 1}\n",
        "def main(*, inputs, outputs):\n    return {'score': 1}\n",
        "def main(**variables):\n    return {'score': 1}\n",
        "def main(*args, **kwargs):\n    return {'score': 1}\n",
        "def main(a=1, /, b=2):\n    return {'score': 1}\n",
        "def main(a=1, /):\n    return {'score': 1}\n",
        "async def main(inputs, outputs):\n    return {'score': 1}\n",
    ],
)
def test_main_interface(code: str) -> None:
    detected = detect("python", code)
    assert detected.interface == "main"
    assert detected.entrypoint == "main"
    assert detected.line == 1


@pytest.mark.parametrize(
    ("code", "param"),
    [
        ("def main(inputs, /):\n    return 1\n", "inputs"),
        ("def main(inputs, /, outputs):\n    return 1\n", "inputs"),
        ("def main(a, b=1, /):\n    return 1\n", "a"),
        ("def main(a, b, /, c=1):\n    return 1\n", "a"),
    ],
)
def test_main_positional_only_without_default_rejected(code: str, param: str) -> None:
    with pytest.raises(InterfaceError) as info:
        detect("python", code)
    assert repr(param) in info.value.message
    assert "positional-only" in info.value.message
    assert ACCEPTED_SIGNATURES in info.value.message
    assert info.value.line == 1


# --- syntax errors ------------------------------------------------------------------------


def test_syntax_error_has_line_and_column() -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n\nx = (1 +\n"
    with pytest.raises(CodeSyntaxError) as info:
        detect("python", code)
    assert info.value.line is not None
    assert info.value.column is not None
    assert isinstance(info.value, DefinitionError)


def test_syntax_error_points_at_the_bad_line() -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n\nreturn = 5\n"
    with pytest.raises(CodeSyntaxError) as info:
        detect("python", code)
    assert info.value.line == 4
    assert info.value.column == 8
    assert "line 4" in info.value.message


def test_indentation_error_is_a_syntax_error() -> None:
    with pytest.raises(CodeSyntaxError) as info:
        detect("python", "def evaluate(inputs, outputs, trace):\nreturn 1.0\n")
    assert info.value.line == 2


def test_null_byte_is_a_syntax_error() -> None:
    with pytest.raises(CodeSyntaxError):
        detect("python", "def evaluate(inputs, outputs, trace):\n    return 1.0\x00\n")


# --- interface errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "",
        "x = 1\n",
        "def score(inputs, outputs, trace):\n    return 1.0\n",
        "evaluate = some_factory()\n",  # not readable from the source
        "class evaluate:\n    pass\n",
        "if True:\n    def evaluate(inputs, outputs, trace):\n        return 1.0\n",
    ],
)
def test_no_entrypoint(code: str) -> None:  # (an assigned lambda is an entrypoint since issue 13: below)
    with pytest.raises(InterfaceError) as info:
        detect("python", code)
    assert "no evaluate() or main()" in info.value.message
    assert ACCEPTED_SIGNATURES in info.value.message


def test_both_entrypoints() -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n\ndef main(inputs):\n    return 1.0\n"
    with pytest.raises(InterfaceError) as info:
        detect("python", code)
    assert "both" in info.value.message
    assert ACCEPTED_SIGNATURES in info.value.message


@pytest.mark.parametrize(
    ("code", "count"),
    [
        ("def evaluate():\n    return 1.0\n", 0),
        ("def evaluate(inputs):\n    return 1.0\n", 1),
        ("def evaluate(inputs, outputs):\n    return 1.0\n", 2),
        ("def evaluate(a, b, c, d, e):\n    return 1.0\n", 5),
        ("async def evaluate(inputs, outputs):\n    return 1.0\n", 2),
    ],
)
def test_evaluate_wrong_arity(code: str, count: int) -> None:
    with pytest.raises(InterfaceError) as info:
        detect("python", code)
    assert f"takes {count} positional" in info.value.message
    assert ACCEPTED_SIGNATURES in info.value.message
    assert info.value.line == 1


@pytest.mark.parametrize(
    "code",
    [
        "def evaluate(inputs, outputs, *trace):\n    return 1.0\n",
        "def evaluate(*args):\n    return 1.0\n",
        "def evaluate(inputs, outputs, trace, *, required):\n    return 1.0\n",
    ],
)
def test_evaluate_needs_plain_positional_parameters(code: str) -> None:
    with pytest.raises(InterfaceError) as info:
        detect("python", code)
    assert ACCEPTED_SIGNATURES in info.value.message


@pytest.mark.parametrize("language", ["ruby", "cobol", "", "Python", "py"])
def test_unknown_language(language: str) -> None:
    with pytest.raises(InterfaceError) as info:
        detect(language, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    assert repr(language) in info.value.message
    assert "not supported" in info.value.message
    assert "'python'" in info.value.message


@pytest.mark.parametrize(
    ("code", "interface"),
    [
        ("evaluate = lambda inputs, outputs, trace: 1.0\n", "evaluate"),
        ("evaluate = lambda app_params, inputs, output, correct_answer: output == correct_answer\n", "legacy"),
        ("main = lambda completion: {'score': 1.0}\n", "main"),
    ],
)
def test_an_assigned_lambda_is_an_entrypoint_with_the_arity_of_its_parameters(code: str, interface: str) -> None:
    assert detect("python", code).interface == interface


# --- async (its rows run in flight: docs/api.md, async evaluators) ------------------------


@pytest.mark.parametrize(
    ("code", "interface", "is_async"),
    [
        ("async def evaluate(inputs, outputs, trace):\n    return 1.0\n", "evaluate", True),
        ("async def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n", "legacy", True),
        ("async def main(inputs, outputs):\n    return {'score': 1.0}\n", "main", True),
        ("def evaluate(inputs, outputs, trace):\n    return 1.0\n", "evaluate", False),
        ("def main(inputs):\n    return {'score': 1.0}\n", "main", False),
        ("evaluate = lambda app_params, inputs, output, correct_answer: 1.0\n", "legacy", False),
        # a sync entrypoint with an async helper is sync: the helper is awaited inside it, or not at all
        (
            "async def judge():\n    return 1\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n",
            "evaluate",
            False,
        ),
    ],
)
def test_an_async_entrypoint_is_detected_for_every_interface(code: str, interface: str, is_async: bool) -> None:
    found = detect("python", code)
    assert (found.interface, found.is_async) == (interface, is_async)
