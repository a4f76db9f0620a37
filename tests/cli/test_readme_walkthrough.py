"""The README's command-line walkthrough as a new user runs it (issue 34, 9): the block that "makes
them" makes every file the commands read (``rows.jsonl`` too), in a scratch directory and never in
the checkout, and the first commands then run on them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.support import REPO

README = (REPO / "README.md").read_text()


def _block_after(marker: str) -> str:
    start = README.index(marker)
    found = re.search(r"```bash\n(.*?)```", README[start:], re.S)
    assert found is not None, marker
    return found.group(1)


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euc", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_files_are_made_outside_the_checkout_and_the_commands_run_on_them(tmp_path: Path) -> None:
    makes = _block_after("this makes\nthem")
    commands = _block_after(makes)  # the block after it
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if k != "ex"}
    env.update(EVALUATOR_HOST_DATA_DIR=str(tmp_path / "data"), EVALUATOR_HOST_BACKEND="process", TMPDIR=str(tmp_path))
    made = _bash(makes + 'echo "$ex"\n', checkout, env)
    assert made.returncode == 0, made.stderr
    ex = Path(made.stdout.strip().splitlines()[-1])
    assert ex.is_dir() and checkout not in ex.parents
    assert sorted(p.name for p in checkout.iterdir()) == [".venv"]  # nothing landed in the checkout
    read = set(re.findall(r'"\$ex/([\w./-]+?)/?"', commands)) - {"results.jsonl"}  # results.jsonl is written
    assert {"my_evaluator.py", "cases.jsonl", "rows.jsonl", "rows.csv", "evaluators"} <= read
    for name in read:
        assert (ex / name).exists(), name
    # the first three commands (no server needed), as written
    first = [line for line in commands.replace("\\\n", " ").splitlines() if "--server" not in line][:3]
    assert '--data "$ex/rows.jsonl"' in first[2]
    env["ex"] = str(ex)
    for line in first:
        ran = _bash(line.split("  #")[0], checkout, env)
        assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-2000:])
    assert (ex / "results.jsonl").read_text().count("\n") == 2
    assert sorted(p.name for p in checkout.iterdir()) == [".venv"]
