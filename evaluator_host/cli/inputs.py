"""The command line's own inputs, checked before anything starts: a mistake is one line and exit code 2.

Every reader here raises :class:`UsageError` with a message that names the option (or file)
and what is wrong with it, never a traceback; ``main`` prints it as
``evaluator-host: error: …`` and exits 2, as argparse does for its own errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pydantic: when a model is parsed, not for building the parser
    from pydantic import BaseModel

__all__ = ["UsageError", "parse_json", "parse_model", "read_text", "readable"]

ModelT = TypeVar("ModelT", bound="BaseModel")


class UsageError(Exception):
    """A command-line input that cannot be used (exit code 2)."""


def readable(path: str, what: str) -> Path:
    """``path`` as a Path when it is a readable file, else :class:`UsageError`."""
    found = Path(path)
    try:
        with found.open("rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from exc
    if found.is_dir():
        raise UsageError(f"{what} {path}: is a directory")
    return found


def read_text(path: str, what: str) -> str:
    """The text of ``path`` (UTF-8), or :class:`UsageError`."""
    try:
        return readable(path, what).read_text()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def parse_json(text: str, what: str) -> Any:
    """``text`` as JSON, or :class:`UsageError` naming where it stopped."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}") from exc


def parse_model(model: type[ModelT], text: str, what: str) -> ModelT:
    """``text`` (JSON) validated as ``model``, or :class:`UsageError` listing every problem on one line."""
    from pydantic import ValidationError

    value = parse_json(text, what)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg'].lower()}" for e in exc.errors()
        )
        raise UsageError(f"{what}: {problems}") from exc
