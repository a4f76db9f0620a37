"""The process backend works wherever the project is checked out and wherever its venv lives.

Regression: a checkout under ``/tmp`` broke JavaScript and TypeScript on the process
backend — the Node binary lives in the venv, and the sandbox's private ``/tmp`` hid it
(``execv`` failed, every JS/TS call answered 503). Each layout below is a real copy of the
package and the harnesses plus a venv holding its own copy of the pinned Node wheel, run as
``evaluator-host run`` in a fresh process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from evaluator_host.definitions.languages import node_executable
from tests.support import REPO

EVALUATORS = {
    "ev.py": "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n",
    "ev.js": "function evaluate(inputs, outputs, trace) {\n  return outputs === inputs.correct_answer\n}\n",
    "ev.ts": "export function evaluate(inputs: {correct_answer: string}, outputs: string, trace: unknown): number {\n"
    "  return outputs === inputs.correct_answer ? 1 : 0\n}\n",
}


def _copy_tree(src: Path, dst: Path) -> None:
    """Hard links where the file system allows them (fast), copies otherwise."""

    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)


def _install(checkout: Path, venv: Path) -> Path:
    """A checkout at ``checkout`` and a venv at ``venv``; returns the venv's python."""
    checkout.mkdir(parents=True)
    for name in ("evaluator_host", "runtimes"):
        shutil.copytree(REPO / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    probe = "import site; print(site.getsitepackages()[0])"
    site = Path(subprocess.check_output([venv / "bin" / "python", "-c", probe], text=True).strip())
    node_pkg = Path(node_executable()).resolve().parents[1]
    _copy_tree(node_pkg, site / node_pkg.name)  # the venv's own Node, under the unusual path
    # every other dependency from the project's venv, after the venv's own site-packages
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


LAYOUTS = {
    "checkout under /tmp, venv inside": ("evh clone/checkout", "evh clone/checkout/.venv"),
    "path with spaces, venv outside the checkout": ("a b/my checkout", "c d/venv elsewhere"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_language_runs_from_an_unusual_install_location(layout: str) -> None:
    checkout_rel, venv_rel = LAYOUTS[layout]
    base = Path(tempfile.mkdtemp(prefix="evh-location-", dir="/tmp"))  # under /tmp whatever TMPDIR says
    try:
        _check_layout(base, base / checkout_rel, base / venv_rel)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _check_layout(base: Path, checkout: Path, venv: Path) -> None:
    python = _install(checkout, venv)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base),
        "EVALUATOR_HOST_BACKEND": "process",
        "EVALUATOR_HOST_DATA_DIR": str(base / "data dir"),
    }
    probe = "from evaluator_host.definitions.languages import node_executable as n; print(n())"
    node = subprocess.check_output([python, "-c", probe], cwd=checkout, env=env, text=True).strip()
    assert node.startswith(str(base)), node  # the copy under the unusual path is the one in use
    case = {"inputs": {"correct_answer": "a"}, "outputs": "a"}
    for name, code in EVALUATORS.items():
        (checkout / name).write_text(code)
        done = subprocess.run(
            [python, "-m", "evaluator_host.cli", "run", name, "--json", "--case", json.dumps(case)],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, f"{name}: {done.stdout}\n{done.stderr}"
        result = json.loads(done.stdout)
        assert result["status"] == "ok" and result["score"] == 1.0, (name, result)
