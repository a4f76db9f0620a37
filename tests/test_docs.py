"""Docs are tested: README commands exist, runtimes have their contract files."""

from __future__ import annotations

import re

from tests.conftest import REPO


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

    from evaluator_host.languages import node_executable

    for argv in (
        [sys.executable, str(REPO / "runtimes" / "python" / "selftest.py")],
        [node_executable(), str(REPO / "runtimes" / "node" / "selftest.mjs")],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
