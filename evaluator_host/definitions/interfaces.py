"""Entrypoint detection and binding rules, decided on the host from the code.

=========  ==============================================  ====================================
interface  signature                                        called with
=========  ==============================================  ====================================
evaluate   ``evaluate(inputs, outputs, trace)``             the request's inputs/outputs/trace
legacy     ``evaluate(app_params, inputs, output,           app_params, inputs, outputs,
           correct_answer)``                                inputs[correct_answer_key] or None
main       ``main(...)`` (Python: params bound by name;     ``variables``: every inputs key plus
           JS/TS: ``main(variables)``)                      inputs/outputs/output/completion/trace
metric     a NeMo Evaluator ``Metric`` class (Python        ``compute_scores(MetricInput)``: ``row.data``
           only): ``type``, ``output_spec()``,              the inputs, ``candidate.output_text`` the
           ``compute_scores(metric_input)``                 outputs (docs/metrics.md)
=========  ==============================================  ====================================

A module must define exactly one of ``evaluate`` / ``main`` at top level, or else (and only then) a
metric class: a top-level class with a ``type`` (an assignment, an annotated assignment or a
method/property), an ``output_spec`` method and a ``compute_scores`` method. With several metric classes
the detector answers them all (``Detected.loader["classes"]``) and :func:`choose` takes the one
``settings.entrypoint`` names. Any entrypoint may be ``async def`` (``Detected.is_async``; for a metric,
``compute_scores``): its rows then run many at once per worker (docs/api.md, async evaluators).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import Detected, InterfaceName
from evaluator_host.definitions.nesting import parse_python
from evaluator_host.errors import InterfaceError
from evaluator_host.shared.lru import LRU

__all__ = [
    "ACCEPTED_SIGNATURES",
    "METRIC_PYTHON_ONLY",
    "Detected",
    "InterfaceName",
    "cached",
    "choose",
    "detect",
    "detect_python",
]

ACCEPTED_SIGNATURES = (
    "define exactly one entrypoint at top level: "
    "evaluate(inputs, outputs, trace) | "
    "evaluate(app_params, inputs, output, correct_answer) (legacy) | "
    'main(...) returning {"score": ...} | '
    "a NeMo Metric class with type, output_spec() and compute_scores(metric_input) (Python only)"
)
METRIC_PYTHON_ONLY = (
    "NeMo-style Metric classes (output_spec() + compute_scores()) run in Python only, as NeMo's "
    'nemo_evaluator_sdk is Python: use language "python", or define evaluate(inputs, outputs, trace) here'
)


_CACHE_SIZE = 512
_cache: LRU[tuple[str, str], Detected] = LRU(_CACHE_SIZE)  # one-off calls resend the same code


def cached(language: str | languages.Language, code: str) -> Detected | None:
    """What :func:`detect` answered for this code before, if it is still remembered (no parse)."""
    return _cache.get((language if isinstance(language, str) else language.name, code))


def detect(language: str | languages.Language, code: str) -> Detected:
    """Detect the interface of ``code`` with its language's detector (the registry's);
    raise a :class:`DefinitionError` when not acceptable or the language is unknown.

    Blocking (a parse, or a round trip to the JS/TS inspector): the service calls it off the
    event loop (:meth:`evaluator_host.evaluation.path.Evaluation.detect`), after :func:`cached`.
    """
    found = cached(language, code)
    if found is None:
        lang = languages.resolve(language)
        found = lang.detect(code)
        _cache.put((lang.name, code), found)
    return found


def _arity_interface(name: str, positional: int, line: int) -> Detected:
    if name == "main":
        return Detected("main", "main", line)
    if positional == 4:
        return Detected("legacy", "evaluate", line)
    if positional == 3:
        return Detected("evaluate", "evaluate", line)
    raise InterfaceError(f"evaluate() takes {positional} positional parameter(s); {ACCEPTED_SIGNATURES}", line=line)


def _metric_class(node: ast.ClassDef) -> tuple[bool, bool] | None:
    """(is a metric class, compute_scores is async) when ``node`` has ``type``, ``output_spec`` and
    ``compute_scores`` in its own body; else None."""
    names: dict[str, ast.stmt] = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names[item.name] = item
        elif isinstance(item, ast.Assign):
            names.update({t.id: item for t in item.targets if isinstance(t, ast.Name)})
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names[item.target.id] = item
    scores = names.get("compute_scores")
    if "type" not in names or not isinstance(names.get("output_spec"), ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    if not isinstance(scores, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    return True, isinstance(scores, ast.AsyncFunctionDef)


def _detect_metric(tree: ast.Module) -> Detected | None:
    """The metric interface of a module with no evaluate()/main(): its one metric class, or every one
    (``loader["classes"]``, ``entrypoint`` empty) for :func:`choose` to pick from by name."""
    classes: dict[str, dict[str, Any]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found = _metric_class(node)
            if found is not None:
                classes[node.name] = {"line": node.lineno, "async": found[1]}
    if not classes:
        return None
    if len(classes) == 1:
        name, info = next(iter(classes.items()))
        return Detected("metric", name, info["line"], is_async=info["async"])
    return Detected("metric", "", None, loader={"classes": classes})


def choose(detected: Detected, entrypoint: str | None) -> Detected:
    """The metric class ``entrypoint`` (``settings.entrypoint``) names, when the code defines several;
    ``detected`` itself otherwise. Raises :class:`InterfaceError` when the name is needed and missing or
    names no metric class of the code."""
    if detected.interface != "metric":
        if entrypoint:
            raise InterfaceError(
                f"settings.entrypoint names a metric class, but this code's interface is {detected.interface!r}"
            )
        return detected
    classes: dict[str, dict[str, Any]] = detected.loader.get("classes") or {}
    if not classes:  # one metric class: the setting may name it, nothing else
        if entrypoint and entrypoint != detected.entrypoint:
            raise InterfaceError(
                f"settings.entrypoint is {entrypoint!r}, but the only metric class is {detected.entrypoint!r}"
            )
        return detected
    names = ", ".join(sorted(classes))
    if not entrypoint:
        raise InterfaceError(
            f"the code defines several metric classes ({names}); name the one to run in settings.entrypoint"
        )
    info = classes.get(entrypoint)
    if info is None:
        raise InterfaceError(f"settings.entrypoint {entrypoint!r} is not a metric class of the code ({names})")
    return Detected("metric", entrypoint, info["line"], is_async=info["async"])


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
    if not found:
        metric = _detect_metric(tree)
        if metric is not None:
            return metric
    if len(found) != 1:
        what = "both evaluate() and main() are" if found else "no evaluate() or main() (nor a Metric class) is"
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
