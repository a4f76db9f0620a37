"""Entrypoint detection and binding rules, decided on the host from the code.

=========  ==============================================  ====================================
interface  signature                                        called with
=========  ==============================================  ====================================
evaluate   ``evaluate(inputs, outputs, trace)``             the request's inputs/outputs/trace
legacy     ``evaluate(app_params, inputs, output,           app_params, inputs, outputs,
           correct_answer)``                                inputs[correct_answer_key] or None
main       ``main(...)`` (Python: params bound by name;     ``variables``: every inputs key plus
           JS/TS: ``main(variables)``)                      inputs/outputs/output/completion/trace
=========  ==============================================  ====================================

A module must define exactly one of ``evaluate`` / ``main`` at top level. Either may be ``async def``
(``Detected.is_async``): its rows then run many at once per worker (docs/api.md, async evaluators).
"""

from __future__ import annotations

import ast
import dataclasses

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import Detected, InterfaceName
from evaluator_host.definitions.nesting import parse_python
from evaluator_host.errors import InterfaceError
from evaluator_host.shared.lru import LRU

__all__ = ["ACCEPTED_SIGNATURES", "Detected", "InterfaceName", "cached", "detect", "detect_python"]

ACCEPTED_SIGNATURES = (
    "define exactly one entrypoint at top level: "
    "evaluate(inputs, outputs, trace) | "
    "evaluate(app_params, inputs, output, correct_answer) (legacy) | "
    'main(...) returning {"score": ...}'
)


_CACHE_SIZE = 512
_cache: LRU[tuple[str, str], Detected] = LRU(_CACHE_SIZE)  # one-off calls resend the same code


def cached(language: str, code: str) -> Detected | None:
    """What :func:`detect` answered for this code before, if it is still remembered (no parse)."""
    return _cache.get((language, code))


def detect(language: str, code: str) -> Detected:
    """Detect the interface of ``code`` with its language's detector (the registry's);
    raise a :class:`DefinitionError` when not acceptable or the language is unknown.

    Blocking (a parse, or a round trip to the JS/TS inspector): the service calls it off the
    event loop (:meth:`evaluator_host.evaluation.path.Evaluation.detect`), after :func:`cached`.
    """
    found = cached(language, code)
    if found is None:
        found = languages.get(language).detect(code)
        _cache.put((language, code), found)
    return found


def _arity_interface(name: str, positional: int, line: int) -> Detected:
    if name == "main":
        return Detected("main", "main", line)
    if positional == 4:
        return Detected("legacy", "evaluate", line)
    if positional == 3:
        return Detected("evaluate", "evaluate", line)
    raise InterfaceError(f"evaluate() takes {positional} positional parameter(s); {ACCEPTED_SIGNATURES}", line=line)


def detect_python(language: str, code: str) -> Detected:
    """The Python detector: a real parse (``ast``, depth-bounded: :mod:`~evaluator_host.definitions.nesting`),
    never an import."""
    tree = parse_python(code)  # a CodeSyntaxError (line, column) when it does not parse or nests too deeply
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ("evaluate", "main"):
            found[node.name] = node
        elif (  # an assigned lambda: `evaluate = lambda app_params, inputs, output, correct_answer: ...`
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Lambda)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("evaluate", "main")
        ):
            found[node.targets[0].id] = node.value
    if len(found) != 1:
        what = "both evaluate() and main() are" if found else "no evaluate() or main() is"
        raise InterfaceError(f"{what} defined at top level; {ACCEPTED_SIGNATURES}")
    name, fn = next(iter(found.items()))
    args = fn.args
    if name == "main":
        for param in args.posonlyargs[: len(args.posonlyargs) - max(0, len(args.defaults) - len(args.args))]:
            raise InterfaceError(
                f"main() parameter {param.arg!r} is positional-only and cannot be bound by name; {ACCEPTED_SIGNATURES}",
                line=fn.lineno,
            )
        return Detected("main", "main", fn.lineno, is_async=isinstance(fn, ast.AsyncFunctionDef))
    if args.vararg is not None or args.kwonlyargs and any(d is None for d in args.kw_defaults):
        raise InterfaceError(f"evaluate() must take plain positional parameters; {ACCEPTED_SIGNATURES}", line=fn.lineno)
    found_interface = _arity_interface(name, len(args.posonlyargs) + len(args.args), fn.lineno)
    if isinstance(fn, ast.AsyncFunctionDef):  # its rows may await together (a run's in_flight)
        return dataclasses.replace(found_interface, is_async=True)
    return found_interface
