"""The vocabulary of a definition shared by every resource that takes code: a language, pins, capabilities."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

from evaluator_host.definitions import languages

__all__ = ["CAPABILITIES_DOC", "MAX_REVISION", "Capabilities", "Language", "Packages"]


def _known_language(name: str) -> str:
    if name not in languages.names():
        raise ValueError(f"language {name!r} is not supported; use one of {languages.names()}")
    return name


Language = Annotated[
    str,
    AfterValidator(_known_language),
    WithJsonSchema({"type": "string", "enum": languages.names()}),
]


Packages = dict[str, str] | list[str]


MAX_REVISION = 2**31 - 1  # revision numbers are 32-bit in the database: a larger one names no revision (422)


Capabilities = dict[str, list[dict[str, Any]]]


CAPABILITIES_DOC = (
    "What the code reaches for, found statically (advisory; the sandbox enforces): network, filesystem, "
    "subprocess, environment, dynamic_code, native — each a list of {line, detail}."
)
