"""Definition-time check of the ``restricted`` policy: the harness's own compiler, on the host.

The rules live once, in the ``restricted/`` policy package of the family's runtime folder (the harness
loads the same folder in the sandbox, by path as one unit); here they only compile — nothing of the
user's code runs on the host.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from evaluator_host.definitions.nesting import MAX_PYTHON_DEPTH, located, parse_python, too_deep
from evaluator_host.errors import CodeSyntaxError, PolicyError

__all__ = ["check_python", "policy_module"]


@functools.cache
def policy_module(folder: Path) -> ModuleType:
    """The policy package ``folder/restricted/``, loaded once, by path, as one unit (as the harness loads
    it in the sandbox). A policy loaded before from another folder keeps its own modules."""
    package = folder / "restricted"
    name = "evaluator_host_restricted"
    for loaded in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
        del sys.modules[loaded]  # its submodules would be found first by the relative imports
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check_python(code: str, folder: Path) -> None:
    """Raise ``PolicyError`` (line, column) when the restricted policy of ``folder`` refuses ``code``."""
    refused = _refusal(code, folder)
    if refused is not None:
        kind, message, line, column = refused
        error = PolicyError if kind == "policy" else CodeSyntaxError
        raise error(message, line=line, column=column)


@functools.lru_cache(maxsize=512)  # one-off calls resend the same code: compile it once
def _refusal(code: str, folder: Path) -> tuple[str, str, int | None, int | None] | None:
    policy = policy_module(folder)
    try:  # the depth bound first: the policy's transformer recurses over the tree (nesting.py)
        parse_python(code)
    except CodeSyntaxError as exc:
        return "syntax", exc.message, exc.line, exc.column
    try:
        policy.compile_restricted(code, "evaluator.py")
    except policy.PolicySyntaxError as exc:
        return "policy", str(exc.msg), exc.lineno, exc.offset
    except SyntaxError as exc:
        return "syntax", located(exc.msg, exc.lineno, exc.offset), exc.lineno, exc.offset
    except (RecursionError, MemoryError):  # never expected under the bound; a 422 all the same
        error = too_deep(None, MAX_PYTHON_DEPTH)
        return "syntax", error.message, None, None
    return None
