"""A definition's plain environment variables (``settings.env``, docs/api.md): which names a definition may
set and how much, checked where the model is parsed (the API, the CLI). Not secrets: shown, stored and never
redacted."""

from __future__ import annotations

import re

from evaluator_host.tenancy.reserved import RESERVED_NAMES

__all__ = ["MAX_ENV", "MAX_ENV_BYTES", "MAX_ENV_VALUE", "check_env"]

MAX_ENV = 50  # plain variables a definition may set
MAX_ENV_VALUE = 4096  # characters of one value
MAX_ENV_BYTES = 16 * 1024  # names and values together, UTF-8
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")
_ENV_PREFIXES = ("LD_", "PYTHON", "NODE_", "NPM_", "UV_", "PIP_", "EVALUATOR_")  # the loader's and runtimes' own


def check_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` when every name is a plain variable a definition may set and the sizes are in bounds, else
    ``ValueError`` naming the first problem (docs/api.md, settings.env)."""
    if len(env) > MAX_ENV:
        raise ValueError(f"at most {MAX_ENV} variables (got {len(env)})")
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name[:120]!r} is not a variable name [A-Z_][A-Z0-9_]* (at most 100 characters)")
        if name in RESERVED_NAMES or name.upper() in RESERVED_NAMES or name.startswith(_ENV_PREFIXES):
            raise ValueError(f"{name!r} is the sandbox's own variable (a definition cannot set it)")
        if len(value) > MAX_ENV_VALUE:
            raise ValueError(f"{name}: a value of at most {MAX_ENV_VALUE} characters (got {len(value)})")
        if "\0" in value:
            raise ValueError(f"{name}: a value cannot hold a NUL character")
    if sum(len(name.encode()) + len(value.encode()) for name, value in env.items()) > MAX_ENV_BYTES:
        raise ValueError(f"at most {MAX_ENV_BYTES} bytes of names and values in all")
    return env
