"""The Python harness's modules (``runtimes/python/evaluator_harness/``) stay what the sandbox can run:
standard library only (no ``evaluator_host``, no third-party import at module level), imported from
the harness's own folder (relative imports), each under 400 lines; and ``harness.py`` leaves
``sys.path`` as it found it, so user code cannot import them by a plain name.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator_host.definitions.languages import RUNTIMES_DIR

PACKAGE = RUNTIMES_DIR / "python" / "evaluator_harness"
MODULES = sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_each_module_is_stdlib_only_relative_and_short(path: Path) -> None:
    source = path.read_text()
    assert len(source.splitlines()) < 400
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [str(node.module)]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top == "__future__", f"{path.name} imports {name}"


def test_user_code_sees_neither_the_harness_folder_nor_its_modules_by_plain_name(tmp_path: Path) -> None:
    code = tmp_path / "evaluator.py"
    code.write_text(
        "import sys\n\ndef evaluate(inputs, outputs, trace):\n"
        "    return {'path': sys.path, 'plain': sorted(m for m in ('channel', 'values', 'rows', 'serve') "
        "if m in sys.modules)}\n"
    )
    config = {"code_path": str(code), "entrypoint": "evaluate", "interface": "evaluate", "work_dir": str(tmp_path)}
    run = json.dumps({"op": "run", "id": "x", "cases": [{"inputs": {}}]}).encode()
    frame = len(run).to_bytes(4, "big") + run
    harness = RUNTIMES_DIR / "python" / "harness.py"
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(harness), json.dumps(config)], input=frame, capture_output=True, timeout=60
    ).stdout
    frames = []
    while out:
        size = int.from_bytes(out[:4], "big")
        frames.append(json.loads(out[4 : 4 + size]))
        out = out[4 + size :]
    value = frames[-1]["value"]
    assert str(harness.parent) not in value["path"]
    assert value["plain"] == []
