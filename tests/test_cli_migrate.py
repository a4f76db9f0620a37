"""`evaluator-host migrate`: files and directories, --diff, --write, --check-with, CI exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import zygote

CLI = [sys.executable, "-m", "evaluator_host.cli", "migrate"]
LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return output == correct_answer\n"
READS_APP = "def evaluate(app_params, inputs, output, correct_answer):\n    return bool(app_params.get('ok'))\n"
V2 = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
JS = "module.exports = (p, i, o, c) => o === c;\n"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"), "EVALUATOR_HOST_BACKEND": "process"}
    return zygote.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "evaluators"
    (root / "sub").mkdir(parents=True)
    (root / "node_modules").mkdir()
    (root / "legacy.py").write_text(LEGACY)
    (root / "sub" / "exact.js").write_text(JS)
    (root / "v2.py").write_text(V2)
    (root / "node_modules" / "dep.js").write_text(JS)  # never touched
    (root / "notes.txt").write_text("not code")
    return root


def test_check_mode_lists_what_would_change_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    done = _run(tmp_path, str(root), "--diff")
    assert done.returncode == 1, done.stderr
    assert f"{root}/legacy.py: would migrate (signature-prologue)" in done.stdout
    assert f"{root}/sub/exact.js: would migrate (adapter)" in done.stdout
    assert f"{root}/v2.py: unchanged (evaluate)" in done.stdout
    assert "+def evaluate(inputs, outputs, trace):" in done.stdout and "node_modules" not in done.stdout
    assert (root / "legacy.py").read_text() == LEGACY


def test_write_rewrites_in_place_and_then_there_is_nothing_left(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert _run(tmp_path, str(root), "--write").returncode == 0
    assert (root / "legacy.py").read_text().startswith("def evaluate(inputs, outputs, trace):\n")
    assert (root / "node_modules" / "dep.js").read_text() == JS
    again = _run(tmp_path, str(root))
    assert again.returncode == 0 and "would migrate" not in again.stdout


def test_a_refused_file_exits_2_and_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "rec.py"
    bad.write_text("def evaluate(a, b, c, d):\n    return evaluate(a, b, c, d)\n")
    done = _run(tmp_path, str(bad))
    assert done.returncode == 2 and f"{bad}:2: refused (MigrationRefused)" in done.stderr


def test_check_with_runs_both_versions_and_keeps_a_file_whose_answers_differ(tmp_path: Path) -> None:
    same, differs = tmp_path / "same.py", tmp_path / "differs.py"
    same.write_text(LEGACY)
    differs.write_text(READS_APP)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"inputs": {"correct_answer": "a"}, "outputs": "a", "app_params": {"ok": true}}\n')
    done = _run(tmp_path, str(same), str(differs), "--check-with", str(rows), "--write")
    assert done.returncode == 1, done.stderr
    assert f"{same}: migrated (signature-prologue) (same answers on every row)" in done.stdout
    assert f"{differs}: NOT migrated: answers differ on 1 row(s)" in done.stdout
    assert differs.read_text() == READS_APP and same.read_text() != LEGACY


def test_the_correct_answer_key_option(tmp_path: Path) -> None:
    path = tmp_path / "k.py"
    path.write_text(LEGACY)
    assert _run(tmp_path, str(path), "--write", "--correct-answer-key", "gold").returncode == 0
    assert 'inputs.get("gold")' in path.read_text()


def test_check_with_runs_the_legacy_code_with_the_correct_answer_key_too(tmp_path: Path) -> None:
    """With ``--correct-answer-key gold`` the legacy run takes ``correct_answer`` from ``inputs["gold"]``, as the
    migrated code does: the same answers, not a mismatch made by the check itself."""
    path = tmp_path / "legacy.py"
    path.write_text(LEGACY)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"inputs": {"gold": "a"}, "outputs": "a"}\n{"inputs": {"gold": "b"}, "outputs": "a"}\n')
    done = _run(tmp_path, str(path), "--check-with", str(rows), "--write", "--correct-answer-key", "gold")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same answers on every row" in done.stdout and 'inputs.get("gold")' in path.read_text()


def test_deeply_nested_files_are_refused_one_by_one_and_the_others_still_migrate(tmp_path: Path) -> None:
    """Issue 28.8: a 120 kB ``a+a+…`` is refused as a SyntaxError naming the bound; it neither crashes the
    command nor breaks the TypeScript transform for the files after it (one Node process serves them all)."""
    root = tmp_path / "evaluators"
    root.mkdir()
    ts_legacy = "export function evaluate(app_params: any, inputs: any, output: string, correct_answer: string) {\n"
    (root / "a_deep.ts").write_text(ts_legacy + "  return 1\n}\nconst x = " + "a+" * 60_000 + "a;\n")
    (root / "b_legacy.ts").write_text(ts_legacy + "  return 1\n}\n")
    (root / "c_deep.py").write_text(LEGACY + "x = " + "a+" * 60_000 + "a\n")
    (root / "d_legacy.py").write_text(LEGACY)
    done = _run(tmp_path, str(root))
    assert done.returncode == 2, done.stderr
    for name, bound in (("a_deep.ts", 200), ("c_deep.py", 100)):
        assert f"{root}/{name}: refused (SyntaxError): the code is nested too deeply" in done.stderr, done.stderr
        assert f"at most {bound})" in done.stderr
    assert f"{root}/b_legacy.ts: would migrate" in done.stdout and f"{root}/d_legacy.py: would migrate" in done.stdout


def test_check_with_rows_that_never_carry_outputs_checks_nothing_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 48 point 1: rows whose answer is in `response` (outputs null on every row) compared nothing."""
    path = tmp_path / "legacy.py"
    path.write_text(LEGACY)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"inputs": {"correct_answer": "a", "response": "a"}}\n' * 3)
    done = _run(tmp_path, str(path), "--check-with", str(rows), "--write")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{path}: NOT migrated: {rows} checks nothing" in done.stdout
    assert "outputs (the legacy code's output) is null or missing on every one of the 3 rows" in done.stdout
    assert path.read_text() == LEGACY


def test_check_with_rows_that_lack_outputs_sometimes_migrates_and_warns_how_many(tmp_path: Path) -> None:
    path = tmp_path / "legacy.py"
    path.write_text(LEGACY)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"inputs": {"correct_answer": "a"}, "outputs": "a"}\n{"inputs": {"correct_answer": "a"}}\n')
    done = _run(tmp_path, str(path), "--check-with", str(rows), "--write")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{path}: warning: outputs (the legacy code's output) is null or missing on 1 of 2 rows" in done.stdout
