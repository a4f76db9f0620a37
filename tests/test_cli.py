"""The console script: `run` without a server, and `serve` as a real process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from evaluator_host.sandbox.docker.engine import Engine
from evaluator_host.settings import Settings
from tests.support import zygote
from tests.support.backends import DOCKER_MISSING, managed_containers
from tests.support.service import free_port, serving

CLI = [sys.executable, "-m", "evaluator_host.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path), **extra}


def test_run_prints_results_and_exit_code(tmp_path: Path) -> None:
    source = tmp_path / "ev.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    print('hello')\n    return outputs == 'a'\n")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"outputs": "a"}\n{"outputs": "b"}\n')
    done = zygote.run(
        [*CLI, "run", str(source), "--cases", str(cases), "--json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["score"] for r in rows] == [1.0, 0.0] and rows[0]["stdout"] == "hello\n"
    pretty = zygote.run(
        [*CLI, "run", str(source), "--case", '{"outputs": "a"}'],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert pretty.returncode == 0 and "ok" in pretty.stdout and "hello" in pretty.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def evaluate(inputs, outputs, trace):\n    raise ValueError('no')\n")
    failed = zygote.run([*CLI, "run", str(broken)], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert failed.returncode == 1 and "ValueError" in failed.stdout


def test_serve_refuses_public_bind_without_keys(tmp_path: Path) -> None:
    done = zygote.run(
        [*CLI, "serve", "--host", "0.0.0.0"], capture_output=True, text=True, env=_env(tmp_path), timeout=30
    )
    assert done.returncode == 2 and "--insecure" in done.stderr


def test_serve_answers_the_quickstart(tmp_path: Path) -> None:
    with serving(tmp_path) as (client, _proc):
        backend = client.get("/healthz").json()["backend"]
        # auto picks docker when an engine and the base image are there
        assert backend == ("process" if DOCKER_MISSING else "docker")
        body = {"language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n"}
        assert client.post("/v1/evaluate", json=body).json()["score"] == 1.0
    if backend == "process":
        assert not list((tmp_path / "run").iterdir())  # no worker directory left behind
    else:
        assert not managed_containers(Engine(Settings(data_dir=tmp_path)).owner)  # no container left behind


def _dataset(tmp_path: Path, n: int = 300) -> Path:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"i": i, "expected": "a", "answer": "a" if i % 3 else "b"}) + "\n" for i in range(n))
    )
    return rows


BATCH_CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['expected']\n"


def test_run_data_in_process_progress_summary_output_and_gates(tmp_path: Path) -> None:
    source = tmp_path / "exact.py"
    source.write_text(BATCH_CODE)
    rows = _dataset(tmp_path)
    out = tmp_path / "results.jsonl"
    env = _env(tmp_path / "data", EVALUATOR_HOST_BACKEND="process")
    argv = [*CLI, "run", str(source), "--data", str(rows), "--map", "outputs=answer"]
    done = zygote.run([*argv, "--output", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "score" in done.stdout and "0.6667" in done.stdout and "rows 300/300" in done.stdout  # the summary table
    assert "300/300" in done.stderr  # the progress bar
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in results] == list(range(300))
    assert results[0]["row"] == {"i": 0, "expected": "a", "answer": "b"} and results[0]["result"]["score"] == 0.0
    gated = zygote.run([*argv, "--fail-under", "0.9"], capture_output=True, text=True, env=env, timeout=120)
    assert gated.returncode == 1 and "below --fail-under" in gated.stderr
    as_json = zygote.run([*argv, "--json"], capture_output=True, text=True, env=env, timeout=120)
    job = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and job["status"] == "succeeded" and job["revision"] == 1  # same code: same revision
    bad_map = zygote.run(
        [*CLI, "run", str(source), "--data", str(rows), "--map", "outputs=nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad_map.returncode == 2 and "FieldMappingError" in bad_map.stderr


def test_run_data_against_a_server(tmp_path: Path) -> None:
    with serving(tmp_path / "server", "process") as (client, _proc):
        source = tmp_path / "exact.py"
        source.write_text(BATCH_CODE)
        rows = _dataset(tmp_path)
        base = str(client.base_url)
        argv = [*CLI, "run", str(source), "--data", str(rows), "--map", "outputs=answer", "--server", base, "--json"]
        first = zygote.run(argv, capture_output=True, text=True, env=_env(tmp_path / "client"), timeout=120)
        assert first.returncode == 0, first.stderr
        job = json.loads(first.stdout)
        assert job["progress"] == {"total": 300, "done": 300, "failed": 0, "cached": 0}
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"  # it ran on the server
        source.write_text(BATCH_CODE.replace("==", "!="))  # a changed file becomes a new revision
        second = zygote.run(argv, capture_output=True, text=True, env=_env(tmp_path / "client"), timeout=120)
        assert second.returncode == 0 and json.loads(second.stdout)["revision"] == 2
        evaluators = client.get("/v1/evaluators").json()
        assert [e["name"] for e in evaluators["data"]] == ["exact.py"]


def test_run_against_a_server_with_keys_takes_its_key_from_the_environment(tmp_path: Path) -> None:
    keys = {"EVALUATOR_HOST_API_KEYS": "k-cli-env"}
    with serving(tmp_path / "server", "process", env=keys) as (client, _proc):
        source = tmp_path / "exact.py"
        source.write_text(BATCH_CODE)
        argv = [*CLI, "run", str(source), "--data", str(_dataset(tmp_path)), "--map", "outputs=answer"]
        argv += ["--server", str(client.base_url), "--json"]
        keyless = zygote.run(argv, capture_output=True, text=True, env=_env(tmp_path / "c1"), timeout=120)
        assert keyless.returncode != 0 and "401" in keyless.stderr + keyless.stdout
        keyed = _env(tmp_path / "c2", EVALUATOR_HOST_API_KEY="k-cli-env")
        with_key = zygote.run(argv, capture_output=True, text=True, env=keyed, timeout=120)
        assert with_key.returncode == 0, with_key.stderr
        assert json.loads(with_key.stdout)["progress"]["done"] == 300


@pytest.mark.network  # builds six from PyPI
def test_in_process_run_leaves_a_live_server_alone(tmp_path: Path) -> None:
    """Regression: `run` without --server used the server's data dir, swept its containers at start-up
    (the server's next build answered a bare-text 500) and wrote into its database."""
    data = tmp_path / "data"
    scratch = tmp_path / "tmp"  # the runs' temporary folders: the other test process's CLI runs make theirs too
    scratch.mkdir()
    untouched = scratch.stat().st_mtime_ns
    # the server's spare build box at start (not 10 s in): the runs below must leave it alone
    with serving(data, env={"EVALUATOR_HOST_SPARE_BUILD_BOX_AFTER_S": "0"}) as (client, _proc):
        backend = client.get("/healthz").json()["backend"]
        owner = Engine(Settings(data_dir=data)).owner
        before = managed_containers(owner) if backend == "docker" else set()
        assert backend == "process" or before  # the docker server has its spares and build box up
        listed = client.get("/v1/evaluators").json()
        source = tmp_path / "ev.py"
        source.write_text(BATCH_CODE)
        rows = _dataset(tmp_path, 20)
        for extra in (["--case", '{"inputs": {"expected": "a"}, "outputs": "a"}'], ["--data", str(rows)]):
            mapping = ["--map", "outputs=answer"] if "--data" in extra else []
            done = zygote.run(
                [*CLI, "run", str(source), *extra, *mapping],
                capture_output=True,
                text=True,
                env=_env(data, TMPDIR=str(scratch)),
                timeout=180,
            )
            assert done.returncode in (0, 1), done.stderr  # scores, not a refusal
        if backend == "docker":
            assert before <= managed_containers(owner)  # not one of the server's containers was removed
        assert client.get("/v1/evaluators").json() == listed  # nothing written into the server's database
        assert client.get("/v1/datasets").json()["data"] == []
        body = {
            "language": "python",
            "packages": {"six": "1.16.0"},  # a new package set: the server's build box must still be there
            "code": "import six\n\ndef evaluate(inputs, outputs, trace):\n    return six.PY3\n",
        }
        answer = client.post("/v1/evaluate", json=body)
        assert answer.status_code == 200 and answer.json()["score"] == 1.0, answer.text
        second = zygote.run(
            [*CLI, "serve", "--port", str(free_port())], capture_output=True, text=True, env=_env(data), timeout=60
        )
        assert second.returncode == 2 and "is using the data dir" in second.stderr  # one service per data dir
    assert scratch.stat().st_mtime_ns != untouched  # the runs made their scratch folders here …
    assert not list(scratch.glob("evaluator-host-run-*"))  # … and removed each at its end


README_ROWS = [
    {"q": "2+2", "correct_answer": "4", "model_expression": "4"},
    {"q": "3+3", "correct_answer": "6", "model_expression": "7"},
]
STRIP_CODE = "def evaluate(inputs, outputs, trace):\n    return outputs.strip() == inputs['correct_answer']\n"


def test_run_data_exits_1_when_rows_error_and_names_the_mapping_that_works(tmp_path: Path) -> None:
    """Regression: a job whose every row errored (no --map, no outputs column) exited 0."""
    source = tmp_path / "exact.py"
    source.write_text(STRIP_CODE)
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "q,correct_answer,model_expression\n"
        + "".join(f"{r['q']},{r['correct_answer']},{r['model_expression']}\n" for r in README_ROWS)
    )
    env = _env(tmp_path / "data", EVALUATOR_HOST_BACKEND="process")
    argv = [*CLI, "run", str(source), "--data", str(rows)]
    done = zygote.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    flat = " ".join(done.stderr.split())
    assert "2 of 2 rows did not end ok" in flat and "--max-error-rate" in flat
    assert "With --map outputs=model_expression the first 2 failed rows run" in flat
    assert "AttributeError" in flat  # what the rows failed with
    assert "errors" in done.stdout and "no value" in done.stdout  # errored rows counted apart
    # every row errored: the job failed (AllRowsErrored), and allowing every row to error does not pass it
    allowed = zygote.run([*argv, "--max-error-rate", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert allowed.returncode == 1 and "AllRowsErrored" in allowed.stdout + allowed.stderr, allowed.stderr
    no_score = zygote.run(
        [*argv, "--max-error-rate", "1", "--fail-under", "0.5"], capture_output=True, text=True, env=env, timeout=120
    )
    assert no_score.returncode == 1 and "no row has a score" in " ".join(no_score.stderr.split())
    fixed = zygote.run(
        [*argv, "--map", "outputs=model_expression"], capture_output=True, text=True, env=env, timeout=120
    )
    assert fixed.returncode == 0 and "hint" not in fixed.stderr, fixed.stderr
    half = zygote.run([*argv, "--max-error-rate", "2"], capture_output=True, text=True, env=env, timeout=60)
    assert half.returncode == 2 and "between 0 and 1" in half.stderr


def test_usage_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """Regression: a malformed --case printed 31 lines of pydantic traceback, a missing file a FileNotFoundError."""
    source = tmp_path / "ev.py"
    source.write_text(BATCH_CODE)
    (tmp_path / "bad.jsonl").write_text('{"outputs": "a"}\n{"inputs": 3, "x": 1}\n')
    expected = {
        ("--case", '{"outputs": 1, "bogus": 2}'): "--case: bogus: extra inputs are not permitted",
        ("--case", '{"outputs": 1'): "--case is not valid JSON: Expecting ',' delimiter at column 14",
        ("--cases", str(tmp_path / "bad.jsonl")): "line 2: x: extra inputs are not permitted",
        ("--data", str(tmp_path / "missing.csv")): "missing.csv: No such file or directory",
        ("--settings", '{"timeout_s": 0}'): "--settings: timeout_s: input should be greater than or equal to 0.1",
    }
    for extra, message in expected.items():
        done = zygote.run(
            [*CLI, "run", str(source), *extra], capture_output=True, text=True, env=_env(tmp_path), timeout=60
        )
        assert done.returncode == 2 and done.stderr.startswith("evaluator-host: error: "), (extra, done.stderr)
        assert message in done.stderr and done.stderr.count("\n") == 1, (extra, done.stderr)
    missing = zygote.run(
        [*CLI, "run", str(tmp_path / "nope.py")], capture_output=True, text=True, env=_env(tmp_path), timeout=60
    )
    assert missing.returncode == 2 and missing.stderr == (
        f"evaluator-host: error: evaluator file {tmp_path / 'nope.py'}: No such file or directory\n"
    )


def test_cases_summary_rounds_for_people_and_json_keeps_full_precision(tmp_path: Path) -> None:
    source = tmp_path / "ev.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return outputs == 'a'\n")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"outputs": "a"}\n{"outputs": "b"}\n{"outputs": "b"}\n')
    done = zygote.run(
        [*CLI, "run", str(source), "--cases", str(cases)],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert "mean score=0.3333 pass rate=33.33%" in done.stdout and "0.33333333" not in done.stdout


def test_run_refuses_deeply_nested_code_with_the_bound_not_a_traceback(tmp_path: Path) -> None:
    """Issue 28.8: a 120 kB ``a+a+…`` is a definition error (exit 2) naming the depth bound."""
    source = tmp_path / "deep.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return 1.0\nx = " + "a+" * 60_000 + "a\n")
    done = zygote.run([*CLI, "run", str(source)], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert "the code is nested too deeply" in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)


def test_run_cases_obey_the_calls_case_limit_like_the_api(tmp_path: Path) -> None:
    """``run --cases`` goes through the API's use case: more than MAX_CASES cases is the 422's LimitError
    (exit 2, one line), and a file within the limit still runs."""
    source = tmp_path / "ev.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    return outputs == 'a'\n")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"outputs": "a"}\n{"outputs": "b"}\n{"outputs": "a"}\n')
    for limit, code in (("2", 2), ("3", 0)):
        done = zygote.run(
            [*CLI, "run", str(source), "--cases", str(cases), "--json"],
            capture_output=True,
            text=True,
            env=_env(tmp_path, EVALUATOR_HOST_MAX_CASES=limit),
            timeout=60,
        )
        assert done.returncode == code, done.stderr
    assert done.stdout.count("\n") == 3
    refused = zygote.run(
        [*CLI, "run", str(source), "--cases", str(cases)],
        capture_output=True,
        text=True,
        env=_env(tmp_path, EVALUATOR_HOST_MAX_CASES="2"),
        timeout=60,
    )
    assert refused.stderr == "LimitError: 3 cases; at most 2 per call (use a job for more)\n", refused.stderr
