"""Issue 34 point 7: what the command line says when something goes wrong — the place of a syntax error
as compilers print it, the URL it could not reach, the port that is taken, logs without terminal colour,
and a mapping hint that never offers the reference column as the outputs."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

from evaluator_host.cli.output import located_error
from tests.support import zygote
from tests.support.service import free_port
from tests.support.wait import wait_until

CLI = [sys.executable, "-m", "evaluator_host.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"), **extra}


def test_located_error_prints_file_line_column_the_source_line_and_a_caret() -> None:
    code = "def evaluate(inputs, outputs, trace):\n\treturn (1 +\n"
    text = located_error("ev.py", code, "SyntaxError", "'(' was never closed (line 2, column 9)", 2, 9)
    assert text.splitlines() == [
        "ev.py:2:9: SyntaxError: '(' was never closed",  # the place once, where compilers put it
        "        return (1 +",
        "               ^",
    ]
    assert located_error("ev.py", code, "PolicyError", "no", None, None) == "ev.py: PolicyError: no"
    assert located_error("ev.py", code, "SyntaxError", "bad (line 9)", 9, None) == "ev.py:9: SyntaxError: bad"


@pytest.mark.parametrize("mode", ["cases", "data"])
def test_run_prints_a_syntax_error_at_file_line_column_with_the_caret(tmp_path: Path, mode: str) -> None:
    """Regression: ``CodeSyntaxError: '(' was never closed (line 1)``: no file, no column, no source."""
    source = tmp_path / "broken.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return (outputs ==\n")
    if mode == "cases":
        extra = ["--case", '{"outputs": "a"}']
    else:
        rows = tmp_path / "rows.jsonl"
        rows.write_text('{"outputs": "a"}\n')
        extra = ["--data", str(rows)]
    argv = [*CLI, "run", str(source), *extra]
    done = zygote.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line.rstrip() for line in done.stderr.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{source}:2:12: SyntaxError: "))
    assert lines[at] == f"{source}:2:12: SyntaxError: '(' was never closed", lines
    assert lines[at + 1 : at + 3] == ["        return (outputs ==", "               ^"], lines
    assert "CodeSyntaxError" not in done.stderr and "(line 2" not in done.stderr


def test_run_with_server_to_a_stopped_service_names_the_url(tmp_path: Path) -> None:
    """Regression: ``ConnectError: All connection attempts failed``, with no word of where."""
    source = tmp_path / "ev.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"outputs": "a"}\n')
    url = "http://127.0.0.1:1"  # nothing listens there, ever (a free port could be the other test process's next)
    argv = [*CLI, "run", str(source), "--data", str(rows), "--server", url]
    done = zygote.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert done.returncode == 1, done.stderr
    flat = " ".join(done.stderr.split())
    assert f"cannot reach the service at {url}" in flat and "evaluator-host serve" in flat, flat


def test_serve_on_a_busy_port_says_the_port_is_in_use_and_how_to_pick_another(tmp_path: Path) -> None:
    """Regression: ``[Errno 98] error while attempting to bind on address``, nothing else."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = zygote.run(
            [*CLI, "serve", "--port", str(port), "--backend", "process"],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr, done.stderr
    assert "PORT=" in done.stderr and "--port" in done.stderr and "Errno" not in done.stderr


def test_json_logs_carry_no_ansi_colour_copy_of_the_message(tmp_path: Path) -> None:
    """Regression: uvicorn's records carried ``color_message`` (the message with ANSI codes) into every JSON line."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = _env(tmp_path, EVALUATOR_HOST_LOG_FORMAT="json", EVALUATOR_HOST_BACKEND="process")
    with open(log, "wb") as sink:
        proc = zygote.popen([*CLI, "serve", "--port", str(port), "--log-level", "info"], env=env, stderr=sink)
        try:
            wait_until(lambda: "Uvicorn running" in log.read_text(), 60, 0.1, what="uvicorn's start line")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(r["logger"].startswith("uvicorn") for r in records), records
    assert all("color_message" not in r for r in records), records
    assert "\x1b[" not in log.read_text()


def test_the_mapping_hint_never_offers_the_reference_column_as_the_outputs(tmp_path: Path) -> None:
    """Regression: with no model column, the hint said ``--map outputs=correct_answer``: the answer compared
    with itself, every row 1.0. Now it says that column is the reference and what to map instead."""
    source = tmp_path / "exact.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return outputs.strip() == inputs['correct_answer']\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "2+2", "correct_answer": "4"}\n{"q": "3+3", "correct_answer": "6"}\n')
    env = _env(tmp_path, EVALUATOR_HOST_BACKEND="process")
    done = zygote.run(
        [*CLI, "run", str(source), "--data", str(rows)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1, done.stderr
    flat = " ".join(done.stderr.split())
    summary = " ".join(done.stdout.split())  # issue 48 point 3: the job failed, and says why
    assert "failed" in summary and "AllRowsErrored: every one of the job's 2 rows errored" in summary, summary
    assert "hint:" in flat and "--map outputs=correct_answer" not in flat, flat
    assert "correct_answer: the reference, never the outputs" in flat
    assert "q run but score every tried row the same" in flat and "--map outputs=q" not in flat
    assert "no column looks like the model's answer" in flat
    assert "map the column that holds the model's answer with --map outputs=COLUMN" in flat
    with_model = tmp_path / "rows2.jsonl"
    with_model.write_text(
        '{"q": "2+2", "correct_answer": "4", "says": "4"}\n{"q": "3+3", "correct_answer": "6", "says": "7"}\n'
    )
    done = zygote.run(
        [*CLI, "run", str(source), "--data", str(with_model)], capture_output=True, text=True, env=env, timeout=120
    )
    flat = " ".join(done.stderr.split())
    assert re.search(r"With --map outputs=says the first 2 failed rows run\.", flat), flat
    assert "correct_answer" not in flat.split("hint:")[1].split("With")[1], flat
