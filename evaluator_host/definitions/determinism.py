"""Whether code reads the clock or draws random numbers: found statically (nothing runs), like the
capability report (:mod:`evaluator_host.definitions.capabilities`), whose other kinds it completes
for one question: may an evaluator's results be cached (:mod:`evaluator_host.evaluation.caching.cache`)?

:func:`unsure` answers the reasons a result of ``code`` may differ between two runs on the same case:
the capability report's ``network``, ``filesystem``, ``environment``, ``subprocess``, ``dynamic_code``
and ``native`` items, and the clock and randomness found here — Python: imports of ``time``,
``datetime``, ``random``, ``secrets``, ``uuid``, ``numpy.random``, ``torch``'s ``rand*``, calls of
``os.urandom``/``os.getrandom``; JavaScript/TypeScript: ``Date``, ``performance.now``,
``process.hrtime``, ``Math.random``, ``crypto``'s random functions. Empty: nothing found (the code
is presumed deterministic). It errs on the side of "unsure": an import alone counts.
"""

from __future__ import annotations

import ast
import functools
import re

from evaluator_host.definitions import languages
from evaluator_host.definitions.capabilities import Report, _blank
from evaluator_host.definitions.nesting import parse_python
from evaluator_host.errors import CodeSyntaxError

__all__ = ["UNSURE_KINDS", "js_clues", "python_clues", "unsure"]

UNSURE_KINDS = ("network", "filesystem", "environment", "subprocess", "dynamic_code", "native")
_PY_MODULES = {
    "time": "time",
    "datetime": "time",
    "calendar": "time",
    "zoneinfo": "time",
    "random": "randomness",
    "secrets": "randomness",
    "uuid": "randomness",
    "numpy.random": "randomness",
    "torch": "randomness",
    "faker": "randomness",
}
_PY_CALLS = {"os.urandom": "randomness", "os.getrandom": "randomness", "np.random": "randomness"}
_JS_PATTERNS = (
    ("time", re.compile(r"\bDate\b")),
    ("time", re.compile(r"\bperformance\s*\.\s*now\b")),
    ("time", re.compile(r"\bprocess\s*\.\s*(hrtime|uptime)\b")),
    ("randomness", re.compile(r"\bMath\s*\.\s*random\b")),
    ("randomness", re.compile(r"\b(randomUUID|getRandomValues|randomBytes|randomInt)\b")),
    ("randomness", re.compile(r"""['"](node:)?crypto['"]""")),
)


@functools.lru_cache(maxsize=512)
def python_clues(code: str) -> tuple[str, ...]:
    try:
        tree = parse_python(code)
    except CodeSyntaxError:
        return ()
    found: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Attribute):
            parts: list[str] = []
            walk: ast.AST = node
            while isinstance(walk, ast.Attribute):
                parts.append(walk.attr)
                walk = walk.value
            if isinstance(walk, ast.Name):
                dotted = ".".join([walk.id, *reversed(parts)])
                for call, kind in _PY_CALLS.items():
                    if dotted == call or dotted.startswith(call + "."):
                        found.append(f"{kind}: {dotted} (line {line})")
            continue
        for name in names:
            pieces = name.split(".")
            for depth in range(len(pieces), 0, -1):
                module_kind = _PY_MODULES.get(".".join(pieces[:depth]))
                if module_kind:
                    found.append(f"{module_kind}: import {name} (line {line})")
                    break
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=512)
def js_clues(code: str) -> tuple[str, ...]:
    found: list[str] = []
    code = _blank(code, keep_strings=True)  # comments never count (as in the capability report)
    for kind, pattern in _JS_PATTERNS:
        match = pattern.search(code)
        if match:
            line = code.count("\n", 0, match.start()) + 1
            found.append(f"{kind}: {match.group(0)} (line {line})")
    return tuple(found)


def unsure(language: str, code: str, report: Report | None = None) -> list[str]:
    """Why a result of ``code`` may differ between runs on one case (see the module docstring); ``report``:
    its capability report when at hand (else computed)."""
    lang = languages.get(language)
    if report is None:
        report = lang.capabilities(code)
    reasons = [
        f"{kind}: {item['detail']} (line {item['line']})" for kind in UNSURE_KINDS for item in report.get(kind, [])
    ]
    reasons += lang.nondeterminism(code)
    return reasons
