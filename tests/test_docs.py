"""Docs are tested: README commands exist, runtimes have their contract files, the paths the docs
name exist, every module is in the architecture table, decisions are numbered in order."""

from __future__ import annotations

import re

from tests.support import REPO


def test_readme_make_commands_are_targets() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    used = set(re.findall(r"make ([a-z-]+)", (REPO / "README.md").read_text()))
    assert {"run", "test"} <= used
    assert used <= targets, used - targets


def test_every_runtime_has_its_contract_files() -> None:
    for language, suffix in (("python", "py"), ("node", "mjs")):
        folder = REPO / "runtimes" / language
        assert (folder / f"harness.{suffix}").exists() and (folder / "manifest.json").exists()
        assert (folder / f"selftest.{suffix}").exists()


def test_docs_exist() -> None:
    for name in ("architecture.md", "api.md", "security.md", "benchmarks.md"):
        assert (REPO / "docs" / name).stat().st_size > 200, name


def test_runtime_selftests_pass() -> None:
    import subprocess
    import sys

    from evaluator_host.definitions.languages import node_executable

    for argv in (
        [sys.executable, str(REPO / "runtimes" / "python" / "selftest.py")],
        [node_executable(), str(REPO / "runtimes" / "node" / "selftest.mjs")],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


_DOCS = (
    "README.md",
    "docs/architecture.md",
    "docs/api.md",
    "docs/security.md",
    "docs/client.md",
    "sandbox_images/README.md",
)
_TOP = ("evaluator_host", "runtimes", "tests", "bench", "sandbox_images")


def test_paths_named_in_docs_exist() -> None:
    pattern = re.compile(r"`((?:" + "|".join(_TOP) + r")/[^`<>\s:]*)")
    for name in _DOCS:
        for path in pattern.findall((REPO / name).read_text()):
            assert (REPO / path).exists(), f"{name} names {path}, which does not exist"


def test_architecture_diagrams_name_real_modules() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    diagrams = "".join(re.findall(r"^```\n(.*?)^```", text, re.M | re.S))
    assert diagrams
    for path in re.findall(r"[a-z_]+(?:/[a-z_]+)*\.(?:py|mjs|cjs)\b", diagrams):
        assert (REPO / path).exists() or (REPO / "evaluator_host" / path).exists(), path


def test_what_lives_where_covers_every_module() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = {m.rstrip("/") for m in re.findall(r"^\| `([^`]+)` \|", text, re.M)}
    for module in sorted((REPO / "evaluator_host").rglob("*.py")):
        if module.name in ("__init__.py", "__main__.py"):
            continue
        rel = module.relative_to(REPO)
        covered = {str(rel)} | {str(parent) for parent in rel.parents}
        assert covered & rows, f"{rel} is not in the 'What lives where' table"


def test_decisions_are_numbered_in_order() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    decisions = text.split("## Decisions and why", 1)[1]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", decisions, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    for name in _DOCS:
        for cited in re.findall(r"decision (\d+)", (REPO / name).read_text()):
            assert 1 <= int(cited) <= len(numbers), f"{name} cites decision {cited}"


def test_readme_configuration_lists_every_setting() -> None:
    """The README's configuration table is exactly what the Settings model gives (`make docs` rewrites it)."""
    from evaluator_host.settings import Settings
    from evaluator_host.settings_doc import BEGIN, END, table

    readme = (REPO / "README.md").read_text()
    assert f"{BEGIN}\n{table()}\n{END}" in readme, "README's settings table is stale: run `make docs`"
    for name in Settings.model_fields:
        assert f"`EVALUATOR_HOST_{name.upper()}`" in readme


def _tree() -> set[str]:
    """Every file and folder of the checkout (not .git, dependencies or build output), relative, folders with '/'."""
    skip = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    found = set()
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if skip & set(rel.parts):
            continue
        found.add(str(rel) + ("/" if path.is_dir() else ""))
    return found


def test_the_architecture_map_names_only_paths_that_exist() -> None:
    """Every path a row of 'What lives where' names exists: the row's own path, and each module, file or folder its
    text names (`db.py`, `queue/`, `jobs/running/lanes.py`), somewhere in the checkout (beside the row's path, in a
    folder the row names first, or where another domain keeps it). A name that was moved or renamed fails here."""
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## What lives where", 1)[1].split("\n## ", 1)[0]
    tree = _tree()
    made = {"dist/", "_bundled/", "src/schema.ts"}  # build output: made by `make install` / the wheel's build
    missing = []
    for key, body in re.findall(r"^\| `([^`]+)` \| (.*) \|$", table, re.M):
        for path in (p.strip() for p in key.split("`, `")):
            if not (REPO / path).exists():
                missing.append(f"row {path}")
        for name in re.findall(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|mjs|cjs|ts|sh|json)|(?:[\w.-]+/)+)`", body):
            if name in made or name.startswith(("http", "/", ".")) or "NAME" in name:
                continue
            if not any(path == name or path.endswith("/" + name) for path in tree):
                missing.append(f"{key}: {name}")
    assert missing == [], "\n".join(missing)
