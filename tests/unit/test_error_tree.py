"""evaluator_host.errors: the drawn tree in its docstring is the classes, their parents and their statuses."""

from __future__ import annotations

import inspect
import re

from evaluator_host import errors
from evaluator_host.errors import EvaluatorHostError

_ROW = re.compile(r"^(?P<indent>(?:[│ ]   )*)(?:[├└]── )?(?P<name>[A-Z]\w+)\s+(?P<status>\d{3})\s")


def _drawn() -> dict[str, tuple[str | None, int]]:
    """Every class the drawing names: its parent (the row above it one level up) and its status."""
    assert errors.__doc__ is not None
    drawing = errors.__doc__.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, tuple[str | None, int]] = {}
    parents: list[str] = []
    for line in drawing.splitlines():
        found = _ROW.match(line.removeprefix("    "))
        if found is None:
            continue  # the header, or a description's second line
        depth = len(found["indent"]) // 4 + (0 if found["name"] == "EvaluatorHostError" else 1)
        del parents[depth:]
        assert found["name"] not in rows, f"{found['name']} is drawn twice"
        rows[found["name"]] = (parents[-1] if parents else None, int(found["status"]))
        parents.append(found["name"])
    return rows


def _classes() -> dict[str, tuple[str | None, int]]:
    return {
        cls.__name__: (None if cls is EvaluatorHostError else cls.__bases__[0].__name__, cls.status)
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, EvaluatorHostError)
    }


def test_the_drawn_tree_is_the_classes_with_their_parents_and_statuses() -> None:
    assert _drawn() == _classes()


def test_every_error_class_has_an_http_status_and_is_exported() -> None:
    for name in _classes():
        cls = getattr(errors, name)
        assert len(cls.__bases__) == 1, f"{name}: one parent, so the tree stays a tree"
        assert isinstance(cls.status, int) and 400 <= cls.status <= 599, name
        assert name in errors.__all__, name


def test_a_subclass_answers_its_parents_status_unless_it_says_otherwise() -> None:
    assert errors.ResponseTooLarge.status == errors.LimitError.status == errors.DefinitionError.status == 422
    assert errors.Overloaded.status == errors.BackendUnavailable.status == errors.SandboxError.status == 503
