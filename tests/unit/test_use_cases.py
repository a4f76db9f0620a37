"""The use-case layer (docs/architecture.md, "The use-case layer"), proven on the package's source.

Routes, the fast path, the CLI and migration call the use cases of ``evaluation/usecases.py``; only
the evaluation domain strings the path's steps together (``Evaluation.validate`` is called nowhere
else); each limit is read, and so checked, in one module; the fast path calls no route function;
the modules split out of the evaluation path keep the path's import rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.source import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "evaluator_host"
EVALUATION = PACKAGE / "evaluation"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', '?')}"


def test_evaluation_validate_is_called_only_inside_the_evaluation_domain() -> None:
    """``<anything>.validate(...)``: the one validating method of the package is ``Evaluation.validate``."""
    calls = [
        (path, node)
        for path in _modules()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "validate"
    ]
    assert calls, "the scan finds the use case's own call"
    outside = [_where(path, node) for path, node in calls if EVALUATION not in path.parents]
    assert outside == [], "\n".join(outside)
    # inside: the use cases (a call) and the stored evaluators (a save), nothing else
    assert {path.name for path, _ in calls} == {"usecases.py", "evaluators.py"}


# a limit's setting -> the modules that may read it (each with its reason)
LIMIT_READERS: dict[str, set[str]] = {
    "max_code_bytes": {"evaluation/limits.py"},
    "max_cases": {"evaluation/limits.py"},
    # the request bound (api/middleware/limits.py, the body-limit middleware and the fast path); the
    # differential run and the revision comparison read a dataset's sample (jobs/datasets/samples.py) up to the
    # bound an inline body of cases already has; verdicts made fixtures (review/fixtures.py) are bounded by what
    # one save could send
    "max_body_bytes": {"api/middleware/limits.py", "jobs/datasets/samples.py", "review/fixtures.py"},
}


@pytest.mark.parametrize("setting", list(LIMIT_READERS))
def test_each_limit_is_checked_in_one_place(setting: str) -> None:
    readers = {
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if path.relative_to(PACKAGE).parts[0] != "settings"  # the settings package declares them
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Attribute) and node.attr == setting
    }
    assert readers == LIMIT_READERS[setting]


def test_each_limit_message_comes_from_one_function() -> None:
    """The functions of ``evaluation/limits.py`` are the only ones raising the code-size and case-count errors."""
    producers = {
        (str(path.relative_to(PACKAGE)), node.name)
        for path in _modules()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for text in ast.walk(node)
        if isinstance(text, ast.Constant) and isinstance(text.value, str)
        if text.value in ("the code is ", " cases; at most ")  # the f-strings' first literal parts
    }
    assert producers == {("evaluation/limits.py", "code_size_error"), ("evaluation/limits.py", "check_case_count")}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_the_fast_path_calls_use_cases_never_route_functions() -> None:
    imported = _imports(PACKAGE / "api" / "middleware" / "fastpath.py")
    assert not [name for name in imported if name.startswith("evaluator_host.api.routes")]
    assert "evaluator_host.evaluation.usecases.evaluate_definition" in imported
    assert "evaluator_host.evaluation.usecases.evaluate_stored" in imported


@pytest.mark.parametrize(
    "surface",
    [
        "api/routes/evaluate.py",
        "api/routes/evaluators.py",
        "cli/main.py",
        "cli/evaluate/run.py",
        "cli/evaluate/migrate.py",
    ],
)
def test_the_surfaces_do_not_string_the_path_together(surface: str) -> None:
    """No surface calls the path's steps (``validate``, ``evaluate`` of the path, the quota, the vault) itself."""
    steps = {"validate", "take_evaluations", "values", "check_declarations"}
    called = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(parsed(PACKAGE / surface))
        if isinstance(node, ast.Call)
    }
    assert not called & steps, sorted(called & steps)


@pytest.mark.parametrize("module", ["prepared.py", "bound.py", "results.py", "limits.py", "usecases.py"])
def test_the_path_modules_keep_the_paths_import_rules(module: str) -> None:
    """What ``tests/unit/test_layers.py`` forbids ``evaluation/path.py``, for the modules split out of it
    (``usecases.py`` reads stored revisions: it may name the store's record, nothing above it)."""
    forbidden: tuple[str, ...] = (
        "evaluator_host.api",
        "evaluator_host.cli",
        "evaluator_host.services",
        "evaluator_host.jobs",
    )
    forbidden += ("evaluator_host.migration", "evaluator_host.testing")
    if module != "usecases.py":
        forbidden += ("evaluator_host.store", "evaluator_host.evaluation.evaluators")
    bad = [name for name in _imports(EVALUATION / module) if name.startswith(forbidden)]
    assert bad == []


def test_the_cli_has_no_import_cycle_between_run_and_batch() -> None:
    """``cli/evaluate/batch.py`` reaches the shared output helpers in ``cli/output.py``, never ``cli/main.py``."""
    batch = PACKAGE / "cli" / "evaluate" / "batch.py"
    assert not [n for n in _imports(batch) if n.startswith("evaluator_host.cli.main")]
    assert not [n for n in _imports(PACKAGE / "cli" / "output.py") if n.startswith("evaluator_host.cli")]


def _callers(name: str) -> set[str]:
    """The modules calling ``name(...)`` (by its bare name or as an attribute)."""
    return {
        str(path.relative_to(PACKAGE))
        for path in _modules()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    }


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("Prepared", set()),  # built by Prepared.of alone (``cls(...)``), for a validation and a stored revision
        ("Bound", {"evaluation/path.py"}),  # made, and cached, by Evaluation.bind alone
        ("unpinned", {"evaluation/prepared.py"}),  # the warnings of imports no pin provides, computed in one place
        ("differences", {"migration/compare.py"}),  # the differential run, once
    ],
)
def test_each_step_exists_once(name: str, where: set[str]) -> None:
    assert _callers(name) == where


def test_bound_evaluators_are_cached_in_one_place() -> None:
    """Only ``Evaluation`` keeps bound evaluators (an annotated container of ``Bound``); stored evaluators
    remember revision records and ask it for the bound form."""
    keepers = {
        str(path.relative_to(PACKAGE))
        for path in _modules()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.AnnAssign) and isinstance(node.annotation, ast.Subscript)
        if any(isinstance(n, ast.Name) and n.id == "Bound" for n in ast.walk(node.annotation))
    }
    assert keepers == {"evaluation/path.py"}


# -- issue 47.6: every path that runs a workspace's code is charged to its max_evaluations_per_s ---------------


def _function(path: Path, cls: str | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    scope: ast.AST = parsed(path)
    if cls is not None:
        scope = next(n for n in ast.walk(scope) if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in ast.walk(scope) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)


def test_only_bound_run_hands_cases_to_the_worker_pool() -> None:
    """``<pool>.run(...)`` (the pool's one way to run cases) is called outside the pool in ``Bound.run`` alone."""
    calls = [
        (path, node)
        for path in _modules()
        if "sandbox" not in path.relative_to(PACKAGE).parts
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
        if (isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("pool", "_pool"))
        or (isinstance(node.func.value, ast.Name) and node.func.value.id == "pool")
    ]
    assert [_where(path, node) for path, node in calls] == [
        _where(EVALUATION / "bound.py", call)
        for call in ast.walk(_function(EVALUATION / "bound.py", "Bound", "run"))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run"
    ]


def test_bound_run_spends_its_receipt_before_any_case_reaches_the_pool() -> None:
    run = _function(EVALUATION / "bound.py", "Bound", "run")
    body = [s for s in run.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    first = body[0]  # the first statement after the docstring
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
    assert ast.unparse(first.value) == "charged.spend(self.workspace, len(cases))"


# each function that runs cases takes the receipt as a parameter without a default: a caller that has
# not charged cannot call it (mypy), whatever route or loop it is
RUNNERS = [
    ("evaluation/bound.py", "Bound", "run"),
    ("evaluation/bound.py", "Bound", "evaluate"),
    ("evaluation/path.py", "Evaluation", "evaluate"),
    ("evaluation/evaluators.py", "Evaluators", "evaluate"),
    ("evaluation/usecases.py", None, "run_stored"),
    ("evaluation/usecases.py", None, "run_definition"),
]


@pytest.mark.parametrize(("module", "cls", "name"), RUNNERS)
def test_every_function_that_runs_cases_requires_a_receipt(module: str, cls: str | None, name: str) -> None:
    args = _function(PACKAGE / module, cls, name).args
    positional = args.posonlyargs + args.args
    defaulted = {a.arg for a in positional[len(positional) - len(args.defaults) :]}
    defaulted |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}
    named = {a.arg: a for a in positional + args.kwonlyargs}
    assert "charged" in named and "charged" not in defaulted
    assert ast.unparse(named["charged"].annotation or ast.Constant(None)) == "Charged"


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("Charged", {"tenancy/quotas.py"}),  # receipts are made by the quota guard alone
        ("job_chunks", {"jobs/running/executor.py"}),  # a job's chunks: unmetered by the rate (max_concurrent_jobs)
        # throughput: online rules, delayed not failed; a fast rule's backfill page paced the same way (issue 50)
        ("pace_evaluations", {"online/scoring/scorer.py", "online/backfill/direct.py"}),
        # calls: /v1/evaluate and by id (usecases), fixtures on save and /test (evaluators), a compare or a
        # differential run (compare), a replay (replay), agreement's run of a revision on reviewed items
        # (review); the scorer's one-by-one run of a paced group whose
        # replies were too large together (each case runs again: charged again, or put back)
        (
            "take_evaluations",
            {
                "evaluation/usecases.py",
                "evaluation/evaluators.py",
                "evaluation/compare.py",
                "jobs/results/replay.py",
                "online/scoring/scorer.py",
                "review/agreement.py",  # a revision run on reviewed items it never scored (issue 53)
                "online/candidates/shadow.py",  # a rule's candidate revision on the cases its live one ran (issue 53)
            },
        ),
    ],
)
def test_evaluations_are_charged_in_known_places_only(name: str, where: set[str]) -> None:
    assert _callers(name) == where
