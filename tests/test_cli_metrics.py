"""The command line with a NeMo metric class, as a new user would run NeMo's tutorial: the file as
written, its dataset, ``--map outputs=model_expression`` (docs/metrics.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support import zygote
from tests.support.nemo import DATASET, EXPECTED, METRIC_TYPE, TUTORIAL_METRIC

CLI = [sys.executable, "-m", "evaluator_host.cli"]


def test_run_a_nemo_metric_file_on_its_dataset_and_one_case(tmp_path: Path) -> None:
    source = tmp_path / "arithmetic.py"
    source.write_text(TUTORIAL_METRIC)
    rows = tmp_path / "math-expressions.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in DATASET))
    env = {
        **os.environ,
        "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"),
        "EVALUATOR_HOST_BACKEND": "process",
        "COLUMNS": "200",
    }
    out = tmp_path / "results.jsonl"
    argv = [*CLI, "run", str(source), "--data", str(rows), "--map", "outputs=model_expression"]
    done = zygote.run([*argv, "--output", str(out)], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"{METRIC_TYPE}.valid_expression" in done.stdout and "0.75" in done.stdout and "0.5" in done.stdout
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["result"]["outputs"]["valid_expression"], r["result"]["outputs"]["correct_value"]) for r in results] == [
        (float(v), float(c)) for v, c in EXPECTED
    ]
    as_json = zygote.run([*argv, "--json"], capture_output=True, text=True, env=env, timeout=180)
    job = json.loads(as_json.stdout)
    assert job["aggregate"]["outputs"][f"{METRIC_TYPE}.correct_value"]["mean"] == 0.5
    one = zygote.run(
        [*CLI, "run", str(source), "--case", '{"inputs": {"expected": 55}, "outputs": "(12 * 4) + 7"}', "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["outputs"][f"{METRIC_TYPE}.correct_value"] == 1.0


def test_the_guide_gives_the_whole_tutorial_metric_and_its_rows() -> None:
    """docs/metrics.md shows the complete file and the four rows a new user saves (no '...' to fill in from
    elsewhere), equal to what the tests run."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    code = guide.split("```python\n", 1)[1].split("```\n", 1)[0]
    assert code == TUTORIAL_METRIC
    rows = guide.split("```jsonl\n", 1)[1].split("```\n", 1)[0]
    assert [json.loads(line) for line in rows.splitlines()] == DATASET
