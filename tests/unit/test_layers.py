"""The dependency direction of the package: arrows only point down (docs/architecture.md draws the tree).

``api, cli -> services (assembly) -> migration -> jobs -> evaluation -> tenancy, builds -> sandbox, store
-> definitions -> errors, settings, storage``; observability is used by all and uses none of them; ``targets``
(a job's model target) is used by jobs and uses none of the layers above it.
Checked on the import statements of every module (also imports inside functions), so a shortcut shows
up here before it shows up in a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.source import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "evaluator_host"
E = "evaluator_host."

SURFACES = (E + "api", E + "cli")
TOP = (*SURFACES, E + "services")  # the surfaces and the assembly
PATH = (E + "evaluation", E + "jobs", E + "migration")  # the evaluation path and what drives it
BELOW = (E + "sandbox", E + "store", E + "builds")

# layer (a folder or module of the package) -> what it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "sandbox": (*TOP, *PATH, E + "store", E + "builds.catalog", E + "tenancy", E + "definitions", E + "testing"),
    # the sandbox's rooms (sandbox/__init__.py): the pool and the egress proxy know no backend nor each other
    "sandbox/pool": (E + "sandbox.process", E + "sandbox.docker", E + "sandbox.egress"),
    "sandbox/egress": (E + "sandbox.process", E + "sandbox.docker", E + "sandbox.pool"),
    "builds": (*TOP, *PATH, E + "store", E + "tenancy", E + "sandbox.pool", E + "sandbox.process", E + "testing"),
    "definitions": (*TOP, *PATH, *BELOW, E + "tenancy", E + "testing"),
    "migration/base.py": (*TOP, *PATH[:2], *BELOW),
    "migration/js.py": (*TOP, *PATH[:2], *BELOW),
    "migration/python": (*TOP, *PATH[:2], *BELOW),
    "migration/codemod.py": (*TOP, *PATH[:2], *BELOW),
    "migration": (*TOP, E + "testing"),
    "evaluation/outcomes/normalize.py": (*TOP, *PATH[1:], *BELOW, E + "definitions", E + "evaluation.path"),
    "evaluation/outcomes/aggregate.py": (*TOP, *PATH[1:], *BELOW, E + "definitions", E + "evaluation.path"),
    "store": (*TOP, *PATH[1:], E + "evaluation.path", E + "evaluation.evaluators", E + "sandbox", E + "builds"),
    "evaluation/path.py": (*TOP, *PATH[1:], E + "store", E + "evaluation.evaluators"),
    "evaluation": (*TOP, *PATH[1:], E + "testing"),
    "tenancy": (*TOP, *PATH, E + "sandbox", E + "builds", E + "testing"),
    "jobs": (*TOP, E + "migration", E + "testing"),
    "jobs/queue": (*SURFACES,),
    "online": (*TOP, E + "migration", E + "jobs", E + "testing"),
    # review queues (issue 53): above jobs and online (it reads their rows and cases), below the surfaces;
    # the scorer's hook that fills a rule's queue is the store's (store/review/fill.py), so nothing imports review
    "review": (*TOP, E + "migration", E + "testing"),
    # score sinks (issue 52): the online routes and the service use them; they know no API, job or CLI
    "sinks": (*TOP, E + "migration", E + "jobs", E + "online", E + "testing"),
    # a job's model target (client, prompt sandbox, budgets, generation stage): jobs import it, never the reverse
    "targets": (*TOP, E + "migration", E + "jobs", E + "testing"),
    # jobs' rooms (jobs/__init__.py): the datasets know nothing of running or reading a job; the running of a
    # job (the write side of its results) never imports the reading of them (both use jobs/stored_form.py)
    "jobs/datasets": (E + "jobs.running", E + "jobs.results", E + "jobs.queue"),
    "jobs/running": (E + "jobs.results", E + "jobs.queue"),
    "jobs/queue/host.py": (E + "jobs.results",),
    "jobs/results": (E + "jobs.queue",),
    "jobs/stored_form.py": (E + "jobs.datasets", E + "jobs.running", E + "jobs.results", E + "jobs.queue"),
    "observability": (*TOP, *PATH, *BELOW, E + "definitions", E + "tenancy", E + "testing"),
    "services.py": (*SURFACES, E + "testing"),
    # the Python client: the API's models and the error envelope, nothing that runs the service
    "client": (
        *TOP,
        *PATH,
        *BELOW,
        E + "tenancy",
        E + "definitions",
        E + "online",
        E + "review",
        E + "targets",
        E + "observability",
        E + "settings",
        E + "storage",
        E + "testing",
        E + "shared",
    ),
}
# The exceptions, each with its reason:
ALLOWED: dict[str, tuple[str, ...]] = {
    # the language registry (definitions/languages.py: reads runtimes/<family>/manifest.json, imports only
    # errors) names each family's harness, installer and launch command, which backends need to start anything
    "sandbox": (E + "definitions.languages",),
    "builds": (E + "definitions.languages",),
    # a codemod's answer (migration/base.py: a dataclass and a diff, no I/O) is what a family's migrator returns
    "definitions": (E + "migration.base",),
    # an `otlp` score sink sends the very span online/scoring/export.py sends (its attributes: one definition)
    "sinks": (E + "online.scoring.export",),
    # the client speaks the API's own models (each domain's models.py, no behaviour) and its error envelope
    "client": tuple(
        E + m
        for m in (
            "evaluation.models",
            "jobs.models",
            "migration.models",
            "builds.models",
            "online.models",
            "online.candidates.shadow_models",  # shadow revisions' answers (issue 53), beside online/models.py
            "review.models",
            "targets.models",
            "tenancy.models",
            "definitions.models",
        )
    ),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _modules(layer: str) -> list[Path]:
    target = PACKAGE / layer
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("layer", list(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    modules = _modules(layer)
    assert modules
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in modules
        for line, name in _imports(m)
        if _within(name, FORBIDDEN[layer]) and not _within(name, ALLOWED.get(layer, ()))
    ]
    assert bad == [], "\n".join(bad)


def test_only_the_api_imports_fastapi_or_starlette() -> None:
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "api" not in m.parents
        for line, name in _imports(m)
        if _within(name, ("fastapi", "starlette"))
    ]
    assert bad == [], "\n".join(bad)


def test_no_domain_imports_the_api_or_the_cli() -> None:
    """Only the surfaces themselves (and the CLI starting the API's server) reach api/ or cli/."""
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in sorted(PACKAGE.rglob("*.py"))
        if not {PACKAGE / "api", PACKAGE / "cli"} & set(m.parents)
        for line, name in _imports(m)
        if _within(name, SURFACES)
    ]
    assert bad == [], "\n".join(bad)


def test_the_testing_package_is_imported_by_no_product_module() -> None:
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "testing" not in m.parents
        for line, name in _imports(m)
        if _within(name, (E + "testing",))
    ]
    assert bad == [], "\n".join(bad)


def test_the_top_level_keeps_only_what_every_domain_shares() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "services.py", "settings_doc.py", "storage.py"]


def test_the_error_tree_is_one_package_that_imports_nothing_else_of_the_package() -> None:
    """``errors/`` (the one tree, split by domain) sits below every layer: its modules import only each other,
    and importers reach it through ``evaluator_host.errors`` alone, never a module of it."""
    inside = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in _modules("errors")
        for line, name in _imports(m)
        if _within(name, ("evaluator_host",)) and not _within(name, (E + "errors",))
    ]
    assert inside == [], "\n".join(inside)
    around = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "errors" not in m.parents
        for line, name in _imports(m)
        if _within(name, tuple(f"{E}errors.{p.stem}" for p in _modules("errors") if p.stem != "__init__"))
    ]
    assert around == [], "\n".join(around)


def test_the_queue_host_runs_chunks_through_the_one_executor_and_retries_nothing_itself() -> None:
    """``jobs/queue/host.py`` hands every chunk to ``jobs/running/executor.py`` (run, retry, store, count): it
    never calls ``Bound.run`` itself, never sleeps, and has no loop around a ``try`` (a retry loop);
    the only loops left are the cancel watcher's and listener's."""
    path = PACKAGE / "jobs" / "queue" / "host.py"
    tree = parsed(path)
    assert (0, E + "jobs.running.executor.ChunkExecutor") in [(0, name) for _, name in _imports(path)]
    runs = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
    ]
    assert runs and all(ast.unparse(node.func) == "self.executor.run" for node in runs)
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.For | ast.While | ast.AsyncFor)]
    retrying = [f"host.py:{loop.lineno}" for loop in loops if any(isinstance(n, ast.Try) for n in ast.walk(loop))]
    assert retrying == [], "a loop around a try in jobs/queue/host.py: retries belong to jobs/running/executor.py"
    sleeps = [
        f"host.py:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("sleep")
    ]
    assert len(sleeps) <= 1, sleeps  # the cancel watcher's poll, nothing else


# -- import cycles: none, counting imports inside functions and under TYPE_CHECKING ---------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its text (``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``; relative imports resolved)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            targets |= {t for n in names if (t := resolve(n)) is not None and t != module}
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_the_cycle_finder_sees_a_lazy_import_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_module_imports_itself_through_others() -> None:
    cycles = [sorted(c) for c in _cycles(_import_graph())]
    assert cycles == [], cycles


def test_the_shared_structures_import_nothing_of_the_package() -> None:
    """``shared/`` (the LRU) sits below every layer, so that any of them may use it."""
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in _modules("shared")
        for line, name in _imports(m)
        if _within(name, ("evaluator_host",))
    ]
    assert bad == [], "\n".join(bad)


def test_the_package_has_one_lru() -> None:
    """Every bounded cache is :class:`evaluator_host.shared.lru.LRU`: no hand-written one beside it."""
    bad = [
        f"{m.relative_to(PACKAGE.parent)}"
        for m in sorted(PACKAGE.rglob("*.py"))
        if m != PACKAGE / "shared" / "lru.py" and ("move_to_end(" in m.read_text() or "OrderedDict" in m.read_text())
    ]
    assert bad == []


def test_the_pool_holds_its_leasing_and_uses_only_its_public_face() -> None:
    """``WorkerPool`` composes its leasing policy (``pool.leasing``) instead of inheriting it, and reaches
    none of the policy's private state (``close()`` uses ``stop``/``close``/``reaped``)."""
    from evaluator_host.sandbox.pool.leasing import Leasing
    from evaluator_host.sandbox.pool.workers import WorkerPool

    assert not issubclass(WorkerPool, Leasing)
    source = (PACKAGE / "sandbox" / "pool" / "workers.py").read_text()
    assert "leasing._" not in source
