"""``evaluator-host run FILE --data ROWS --target-url …``: a model-target job from the terminal, in
process, against a loopback OpenAI-compatible server — as a new user would point it at a local model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support import zygote
from tests.support.llm_server import llm_server

CLI = [sys.executable, "-m", "evaluator_host.cli"]
CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == 'A: Q: ' + inputs['question']\n"


def test_run_data_with_a_model_target(tmp_path: Path) -> None:
    source = tmp_path / "judge.py"
    source.write_text(CODE)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}"}) + "\n" for i in range(25)))
    template = tmp_path / "prompt.j2"
    template.write_text("Q: {{ question }}")
    out = tmp_path / "results.jsonl"
    with llm_server() as llm:
        env = {
            **os.environ,
            "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"),
            "EVALUATOR_HOST_BACKEND": "process",
            "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.test": "127.0.0.1"}),
        }
        url = f"http://llm.test:{llm.port}/v1"
        argv = [*CLI, "run", str(source), "--data", str(rows), "--target-url", url, "--target-model", "m"]
        done = zygote.run(
            [*argv, "--prompt-file", str(template), "--concurrency", "8", "--output", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "rows 25/25" in done.stdout and "model: 25 calls" in done.stdout
        results = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["generation"]["text"] for r in results] == [f"A: Q: q{i}" for i in range(25)]
        assert all(r["result"]["passed"] is True for r in results)
        capped = zygote.run(
            [*argv, "--prompt", "Q: {{ question }}", "--max-calls", "5"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert capped.returncode == 1 and "budget_exhausted" not in capped.stderr
        assert "BudgetExhausted" in capped.stdout and "rows 5/25" in capped.stdout
        refused = zygote.run(
            [*argv[:-4], "--target-url", url.replace("llm.test", "other.test"), "--target-model", "m", "--prompt", "x"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert refused.returncode == 2 and "other.test" in refused.stderr, refused.stderr
        # a prompt naming a column no row has: refused before the job (issue 48.4), naming the variable and the
        # rows' columns, and never suggesting to map outputs (a model target's outputs is the model's answer)
        missing = zygote.run([*argv, "--prompt", "Q: {{ nope }}"], capture_output=True, text=True, env=env, timeout=120)
        flat = " ".join((missing.stdout + missing.stderr).split())
        assert missing.returncode == 2 and "FieldMappingError" in flat and "{{ nope }}" in flat, flat
        assert "columns: 'question'" in flat and "--map outputs" not in flat, flat
