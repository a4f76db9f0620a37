"""/v1/datasets and /v1/jobs on every backend: uploads, mapping, aggregates, results, failures, cancel, scale."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.docker.engine import Engine
from evaluator_host.settings import Settings
from tests.support.backends import BACKENDS, managed_containers
from tests.support.jobs import create_evaluator, jsonl, ndjson, start, upload, wait
from tests.support.service import assert_healthy, make_settings
from tests.support.wait import wait_until

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

Json = dict[str, Any]

SCORED = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': float(outputs == inputs['expected']), 'length': len(outputs), 'long': len(outputs) > 3}\n"
)


# -- datasets --------------------------------------------------------------------------------


def test_upload_every_format(client: TestClient) -> None:
    rows = [{"q": "a,b", "expected": "x"}, {"q": "line\nbreak", "expected": "y", "extra": 1}]
    as_jsonl = upload(client, jsonl(rows), name="mine")
    assert as_jsonl["row_count"] == 2 and as_jsonl["columns"] == ["q", "expected", "extra"]
    assert as_jsonl["format"] == "jsonl" and as_jsonl["name"] == "mine"
    as_array = upload(client, json.dumps(rows, indent=2).encode(), "application/json")
    assert as_array["format"] == "json" and as_array["row_count"] == 2
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerows([["q", "expected"], ["a,b", "x"], ["line\nbreak", "y"]])
    as_csv = upload(client, text.getvalue().encode(), "text/csv")
    assert as_csv["format"] == "csv" and as_csv["columns"] == ["q", "expected"] and as_csv["row_count"] == 2
    multipart = client.post("/v1/datasets", files={"file": ("rows.csv", text.getvalue().encode(), "text/plain")})
    assert multipart.status_code == 201, multipart.text
    assert multipart.json()["name"] == "rows" and multipart.json()["format"] == "csv"
    assert as_csv["name"].startswith("upload 20") and as_csv["name"].endswith(" UTC")  # raw body: named for when
    listed = client.get("/v1/datasets").json()
    assert {as_jsonl["id"], as_csv["id"], multipart.json()["id"]} <= {d["id"] for d in listed["data"]}
    assert client.get(f"/v1/datasets/{as_csv['id']}").json() == as_csv
    assert client.get("/v1/datasets/ds_nope").status_code == 404


@pytest.mark.parametrize(
    ("body", "content_type", "line"),
    [
        (b'{"a": 1}\n{"a": \n', "application/jsonl", 2),
        (b'{"a": 1}\n[1, 2]\n', "application/jsonl", 2),
        (b'[{"a": 1}, {"a": NaN}]', "application/json", 2),
        (b"a,b\n1,2\n1,2,3\n", "text/csv", 3),
    ],
)
def test_bad_datasets_name_the_line(client: TestClient, body: bytes, content_type: str, line: int) -> None:
    response = client.post("/v1/datasets", content=body, headers={"content-type": content_type})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "DatasetError" and error["line"] == line


def test_dataset_size_limit_is_413_and_the_service_stays_healthy(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(
        tmp_path, backend="process", max_dataset_bytes=100_000, max_body_bytes=1000, database_url=database_url
    )
    with TestClient(create_app(settings)) as client:
        big = jsonl([{"i": i, "pad": "x" * 50} for i in range(3000)])
        assert (
            client.post("/v1/datasets", content=big, headers={"content-type": "application/jsonl"}).status_code == 413
        )

        def chunks() -> Iterator[bytes]:  # no content-length: the limit holds on the bytes read
            for i in range(0, len(big), 4096):
                yield big[i : i + 4096]

        response = client.post("/v1/datasets", content=chunks(), headers={"content-type": "application/jsonl"})
        assert response.status_code in (413, 422) and response.json()["error"]["type"] in (
            "PayloadTooLarge",
            "LimitError",
        )
        fits = jsonl([{"i": i} for i in range(2000)])  # above max_body_bytes, below max_dataset_bytes
        assert upload(client, fits)["row_count"] == 2000
        assert not list((tmp_path / "datasets").glob(".*")), "a refused upload left a temporary file"
        assert_healthy(client)


# -- jobs --------------------------------------------------------------------------------------


def test_inline_rows_mapping_and_aggregate(client: TestClient) -> None:
    ev = create_evaluator(client, SCORED, settings={"threshold": 0.5})
    answers = ["x", "nope", "x", "longer", "x"]
    rows = [{"id": i, "expected": "x", "model_expression": a} for i, a in enumerate(answers)]
    job = start(client, ev["id"], rows=rows, field_mapping={"outputs": "model_expression"})
    assert job["status"] in ("queued", "running", "succeeded") and job["progress"]["total"] == 5
    job = wait(client, job["id"])
    assert job["status"] == "succeeded", job
    assert job["progress"] == {"total": 5, "done": 5, "failed": 0, "cached": 0}
    assert job["revision"] == 1 and job["runtime_id"] == ev["runtime_id"]
    agg = job["aggregate"]
    scores = [float(a == "x") for a in answers]
    assert agg["count"] == 5 and agg["errors"] == 0
    assert agg["score"]["mean"] == pytest.approx(statistics.fmean(scores))
    assert agg["score"]["std"] == pytest.approx(statistics.pstdev(scores))
    assert agg["pass_rate"] == pytest.approx(0.6)
    assert agg["outputs"] == {}  # length/long are details of a score dict
    results = ndjson(client, job["id"])
    assert [r["index"] for r in results] == [0, 1, 2, 3, 4]
    assert [r["row"] for r in results] == rows  # inputs kept the whole row
    assert all(r["result"]["revision"] == 1 and r["result"]["runtime"]["id"] == ev["runtime_id"] for r in results)
    assert results[3]["result"]["details"] == {"length": 6, "long": True}


def test_named_outputs_aggregate_as_rates_and_stats(client: TestClient) -> None:
    code = (
        "def evaluate(inputs, outputs, trace):\n"
        "    if inputs['i'] == 3:\n        raise ValueError('row three')\n"
        "    return {'exact': outputs == inputs['expected'], 'chars': len(outputs)}\n"
    )
    ev = create_evaluator(client, code)
    rows = [{"i": i, "expected": "ab", "output": "ab" if i % 2 else "abc"} for i in range(6)]
    job = wait(client, start(client, ev["id"], rows=rows)["id"])  # default mapping: the `output` column
    assert job["status"] == "succeeded" and job["progress"] == {"total": 6, "done": 6, "failed": 1, "cached": 0}
    agg = job["aggregate"]
    assert agg["errors"] == 1 and agg["score"] is None and agg["pass_rate"] is None
    exact = [float(i % 2 == 1) for i in range(6) if i != 3]
    assert agg["outputs"]["exact"]["mean"] == pytest.approx(statistics.fmean(exact))
    assert agg["outputs"]["exact"]["nan_count"] == 1 and agg["outputs"]["chars"]["max"] == 3.0
    failed = ndjson(client, job["id"])[3]["result"]
    assert failed["status"] == "error" and failed["error"]["type"] == "ValueError" and failed["error"]["line"] == 3


def test_all_rows_failing_fails_the_job_and_an_empty_dataset_is_refused(client: TestClient) -> None:
    """Issue 48 point 3 changed this test: a job whose every row errored was ``succeeded`` (a green badge over
    nothing checked) and a job over an empty dataset finished ``succeeded`` with no row. Now the first is
    ``failed`` (``AllRowsErrored``) and the second is refused before it starts."""
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    raise RuntimeError('never')\n")
    job = wait(client, start(client, ev["id"], rows=[{"outputs": i} for i in range(7)])["id"])
    assert job["status"] == "failed" and job["progress"] == {"total": 7, "done": 7, "failed": 7, "cached": 0}
    error = job["error"]
    assert error["type"] == "AllRowsErrored" and error["most_common"] == {"type": "RuntimeError", "count": 7}
    agg = job["aggregate"]
    assert agg["count"] == 7 and agg["errors"] == 7
    assert agg["score"] == {"mean": None, "std": None, "min": None, "max": None, "count": 0, "nan_count": 7}
    empty = upload(client, b"")
    refused = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "dataset_id": empty["id"]})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["type"] == "NothingCompared" and refused.json()["error"]["field"] == "rows"


def test_mapping_and_request_errors(client: TestClient) -> None:
    ev = create_evaluator(client, SCORED)
    ds = upload(client, jsonl([{"expected": "x", "model_expression": "x", "meta": {"answer": "x"}}]))
    response = client.post(
        "/v1/jobs", json={"evaluator_id": ev["id"], "dataset_id": ds["id"], "field_mapping": {"outputs": "answer"}}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert (
        error["type"] == "FieldMappingError"
        and "'answer'" in error["message"]
        and "model_expression" in error["message"]
    )
    nested = start(
        client, ev["id"], dataset_id=ds["id"], field_mapping={"outputs": "meta.answer", "inputs": ["expected"]}
    )
    result = ndjson(client, wait(client, nested["id"])["id"])[0]["result"]
    assert result["status"] == "ok" and result["score"] == 1.0
    both = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "dataset_id": ds["id"], "rows": [{}]})
    neither = client.post("/v1/jobs", json={"evaluator_id": ev["id"]})
    assert both.status_code == 422 and neither.status_code == 422
    assert client.post("/v1/jobs", json={"evaluator_id": "ev_nope", "rows": [{}]}).status_code == 404
    assert client.post("/v1/jobs", json={"evaluator_id": ev["id"], "dataset_id": "ds_nope"}).status_code == 404
    assert client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{}], "revision": 9}).status_code == 404
    assert client.get("/v1/jobs/job_nope").status_code == 404
    warned = wait(client, start(client, ev["id"], rows=[{"expected": "x"}])["id"])
    assert warned["warnings"] and "outputs is null" in warned["warnings"][0]


def test_results_pages_ndjson_and_csv_in_input_order(client: TestClient) -> None:
    ev = create_evaluator(client, SCORED)
    rows = [{"n": i, "expected": "x", "outputs": "x" if i % 3 else "y", "tags": [i]} for i in range(2500)]
    ds = upload(client, jsonl(rows))
    job = wait(client, start(client, ev["id"], dataset_id=ds["id"])["id"])
    assert job["status"] == "succeeded"
    seen: list[int] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"/v1/jobs/{job['id']}/results", params={"offset": offset, "limit": 1000}).json()
        assert page["total"] == 2500 and len(page["data"]) <= 1000
        seen += [item["index"] for item in page["data"]]
        assert all(item["row"] == rows[item["index"]] for item in page["data"])
        offset = page["next_offset"]
    assert seen == list(range(2500))
    middle = client.get(f"/v1/jobs/{job['id']}/results", params={"offset": 1500, "limit": 3}).json()
    assert [i["index"] for i in middle["data"]] == [1500, 1501, 1502] and middle["next_offset"] == 1503
    assert client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 5000}).status_code == 422
    streamed = ndjson(client, job["id"])
    assert [r["index"] for r in streamed] == list(range(2500))
    assert [r["result"]["score"] for r in streamed] == [float(i % 3 != 0) for i in range(2500)]
    response = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert len(table) == 2500 and table[4]["n"] == "4" and table[4]["tags"] == "[4]"
    assert table[3]["status"] == "ok" and table[3]["score"] == "0.0" and table[4]["score"] == "1.0"
    assert json.loads(table[4]["details"]) == {"length": 1, "long": False}
    assert list(table[0])[list(table[0]).index("passed") + 1 :][:2] == ["label", "reason"]


def test_the_csv_export_has_the_label_and_the_reason(client: TestClient) -> None:
    """A result's ``label`` and ``reason`` are columns of the CSV export (empty when the evaluator gave none)."""
    code = (
        "def evaluate(inputs, outputs, trace):\n"
        "    if outputs == 'skip':\n"
        "        return 0.5\n"
        "    ok = outputs == inputs['expected']\n"
        "    return {'score': float(ok), 'label': 'good' if ok else 'bad', 'reason': f'got {outputs}, =sum'}\n"
    )
    ev = create_evaluator(client, code)
    rows = [{"expected": "x", "outputs": o} for o in ("x", "y", "skip")]
    job = wait(client, start(client, ev["id"], dataset_id=upload(client, jsonl(rows))["id"])["id"])
    text = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"}).text
    table = list(csv.DictReader(io.StringIO(text)))
    assert [(r["label"], r["reason"]) for r in table] == [("good", "got x, =sum"), ("bad", "got y, =sum"), ("", "")]
    assert_healthy(client)


def test_a_long_poll_answers_when_the_job_is_finished(client: TestClient) -> None:
    """``GET /v1/jobs/{id}?wait_s=`` answers once the job is finished (here, 20 rows of 50 ms each on one
    worker: not finished when the request arrives); ``wait_s`` is bounded, and the workspace rule holds."""
    slow = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.05)\n    return True\n"
    ev = create_evaluator(client, slow)
    job = start(client, ev["id"], rows=[{"i": i} for i in range(20)], parallelism=1)
    waited = client.get(f"/v1/jobs/{job['id']}", params={"wait_s": 60})
    assert waited.status_code == 200
    assert waited.json()["status"] == "succeeded" and waited.json()["progress"]["done"] == 20
    assert client.get(f"/v1/jobs/{job['id']}", params={"wait_s": 30}).json() == waited.json()  # finished: at once
    for bad in ("61", "-1", "soon", "nan"):
        assert client.get(f"/v1/jobs/{job['id']}", params={"wait_s": bad}).status_code == 422, bad
    assert client.get("/v1/jobs/job_nope", params={"wait_s": 5}).status_code == 404
    assert_healthy(client)


def test_bare_rows_stored_short_read_back_whole_in_pages_ndjson_and_csv(client: TestClient) -> None:
    """A bare row (a bool or a number, nothing printed) is stored without its default fields; every
    reader puts them back, so it reads exactly as a row stored whole does."""
    code = (
        "def evaluate(inputs, outputs, trace):\n    k = inputs['k']\n"
        "    if k == 0:\n        return True\n    if k == 1:\n        return 0.25\n"
        "    if k == 2:\n        return {'score': 0.5}\n    if k == 3:\n        print('noise')\n        return False\n"
        "    return {'score': 1, 'reason': 'fine', 'f1': 0.5}\n"
    )
    ev = create_evaluator(client, code)
    job = wait(client, start(client, ev["id"], rows=[{"k": k % 5} for k in range(10)])["id"])
    assert job["status"] == "succeeded"
    paged = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
    streamed = ndjson(client, job["id"])
    assert [item["result"] for item in streamed] == [item["result"] for item in paged]
    for item in streamed:
        assert list(item["result"])[:14] == [
            "status", "score", "passed", "outputs", "details", "reason", "label", "error", "warnings",
            "stdout", "stderr", "truncated", "duration_ms", "capabilities",
        ]  # fmt: skip
    first = streamed[0]["result"]
    assert (first["score"], first["outputs"], first["details"], first["warnings"], first["stdout"]) == (
        1.0, {}, {}, [], "",
    )  # fmt: skip
    assert streamed[3]["result"]["stdout"] == "noise\n" and streamed[4]["result"]["reason"] == "fine"
    table = list(
        csv.DictReader(io.StringIO(client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"}).text))
    )
    assert [row["score"] for row in table[:5]] == ["1.0", "0.25", "0.5", "0.0", "1.0"]
    assert [row["status"] for row in table] == ["ok"] * 10 and table[0]["details"] == ""


def test_failing_rows_are_isolated(client: TestClient) -> None:
    """A row that raises, hangs, exits, floods output or exhausts memory marks that row only."""
    code = (
        "import os, sys, time\n\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    kind = inputs['kind']\n"
        "    if kind == 'raise':\n        raise KeyError('bad row')\n"
        "    if kind == 'hang':\n        time.sleep(30)\n"
        "    if kind == 'exit':\n        os._exit(3)\n"
        "    if kind == 'flood':\n        print('x' * 2_000_000)\n"
        "    if kind == 'memory':\n        b = bytearray(1 << 30)\n"
        "    return 1.0\n"
    )
    ev = create_evaluator(client, code, settings={"timeout_s": 1.0, "memory_mb": 128})
    kinds = ["ok"] * 40
    bad = {5: "raise", 12: "hang", 20: "exit", 27: "flood", 33: "memory"}
    for index, kind in bad.items():
        kinds[index] = kind
    job = wait(client, start(client, ev["id"], rows=[{"kind": k} for k in kinds])["id"])
    assert job["status"] == "succeeded", job
    assert job["progress"] == {"total": 40, "done": 40, "failed": 5, "cached": 0}
    results = ndjson(client, job["id"])
    statuses = {r["index"]: r["result"]["status"] for r in results}
    assert statuses[5] == "error" and statuses[12] == "timeout" and statuses[20] == "error"
    assert statuses[27] == "output_limit" and statuses[33] in ("memory_limit", "error")
    assert all(statuses[i] == "ok" for i in range(40) if i not in bad)
    assert_healthy(client)


def test_cancel_stops_promptly_and_keeps_committed_rows(client: TestClient) -> None:
    ev = create_evaluator(
        client, "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.02)\n    return 1\n"
    )
    job = start(client, ev["id"], rows=[{"i": i} for i in range(5000)])
    wait(client, job["id"], until=lambda j: j["progress"]["done"] >= 50)
    began = time.monotonic()
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert time.monotonic() - began < 5.0
    done = cancelled.json()["progress"]["done"]
    assert 50 <= done < 5000 and cancelled.json()["finished_at"]
    time.sleep(0.5)
    later = client.get(f"/v1/jobs/{job['id']}").json()
    assert later["status"] == "cancelled" and later["progress"]["done"] == done  # nothing ran after
    assert len(ndjson(client, job["id"])) == done == later["aggregate"]["count"]
    again = client.post(f"/v1/jobs/{job['id']}/cancel").json()  # cancelling twice changes nothing
    assert again["status"] == "cancelled" and again["progress"]["done"] == done
    queued = client.get("/v1/jobs", params={"status": "cancelled"}).json()
    assert job["id"] in {j["id"] for j in queued["data"]}
    assert_healthy(client)


def _descendants(pid: int) -> Iterator[int]:
    kids: list[str] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):  # children of every thread, not just the main one
        try:
            kids += (task / "children").read_text().split()
        except OSError:
            pass
    for kid in map(int, kids):
        yield kid
        yield from _descendants(kid)


def _kill_workers(backend: str, data_dir: Path) -> int:
    """SIGKILL every worker of the service on ``data_dir`` from outside (its processes, or its containers)."""
    if backend == "docker":
        import docker

        engine = docker.from_env(timeout=10)
        try:
            killed = 0
            owner = Engine(Settings(data_dir=data_dir)).owner
            for container_id in managed_containers(owner):
                try:
                    engine.containers.get(container_id).kill()
                    killed += 1
                except docker.errors.APIError:
                    pass
            return killed
        finally:
            engine.close()
    killed = 0
    for pid in _worker_tops(data_dir):  # a worker's whole pid namespace dies with its top process
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed


def _worker_tops(data_dir: Path) -> list[int]:
    """The top process of every process-backend worker of the service on ``data_dir`` (its working
    directory is the worker's folder under the data dir; the config is not on any command line)."""
    tops = []
    for pid in _descendants(os.getpid()):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(data_dir / "run")):
                tops.append(pid)
        except OSError:
            pass
    return tops


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_killed_mid_job(tmp_path: Path, backend: str) -> None:
    """Workers SIGKILLed from outside mid-job: their rows fail, fresh workers finish the job."""
    code = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.005)\n    return 1\n"
    data_dir = tmp_path / backend
    with TestClient(create_app(make_settings(data_dir, backend=backend))) as client:
        ev = create_evaluator(client, code)
        job = start(client, ev["id"], rows=[{"i": i} for i in range(1500)])
        wait(client, job["id"], until=lambda j: j["progress"]["done"] >= 200)
        assert _kill_workers(backend, data_dir) >= 1
        job = wait(client, job["id"])
        assert job["status"] == "succeeded", job
        progress = job["progress"]
        assert progress["done"] == 1500 and 0 <= progress["failed"] <= 2 * job["parallelism"]
        results = ndjson(client, job["id"])
        assert [r["index"] for r in results] == list(range(1500))
        failures = [r["result"] for r in results if r["result"]["status"] != "ok"]
        assert len(failures) == progress["failed"]
        assert all(f["error"]["type"] == "WorkerExited" for f in failures)
        assert_healthy(client)


def test_hundred_thousand_rows(client: TestClient) -> None:
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['expected']\n")
    rows = b"".join(
        json.dumps({"i": i, "expected": "a", "model_expression": "a" if i % 4 else "b"}).encode() + b"\n"
        for i in range(100_000)
    )
    ds = upload(client, rows)
    assert ds["row_count"] == 100_000
    job = wait(
        client, start(client, ev["id"], dataset_id=ds["id"], field_mapping={"outputs": "model_expression"})["id"], 600
    )
    assert job["status"] == "succeeded", job
    assert job["progress"] == {"total": 100_000, "done": 100_000, "failed": 0, "cached": 0}
    assert job["aggregate"]["score"]["mean"] == 0.75 and job["aggregate"]["count"] == 100_000
    assert job["rows_per_s"] and job["rows_per_s"] > 0 and not math.isnan(job["rows_per_s"])
    response = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"})
    indices = [json.loads(line)["index"] for line in response.text.splitlines()]
    assert indices == list(range(100_000))


def test_jobs_queue_behind_max_running_jobs_and_infrastructure_failure_fails_the_job(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, backend="process", max_running_jobs=1)
    with TestClient(create_app(settings)) as client:
        slow = create_evaluator(
            client, "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.05)\n    return 1\n"
        )
        first = start(client, slow["id"], rows=[{"i": i} for i in range(400)])
        ds = upload(client, jsonl([{"outputs": 1}] * 10))
        second = start(client, slow["id"], dataset_id=ds["id"])
        time.sleep(0.5)
        assert client.get(f"/v1/jobs/{second['id']}").json()["status"] == "queued"  # the only slot is taken
        assert client.get(f"/v1/jobs/{second['id']}").json()["aggregate"] is None
        (tmp_path / "datasets" / f"{ds['id']}.jsonl").unlink()  # the dataset's rows vanish from disk
        client.post(f"/v1/jobs/{first['id']}/cancel")
        failed = wait(client, second["id"])
        assert failed["status"] == "failed" and failed["error"]["type"] == "FileNotFoundError", failed
        assert failed["finished_at"] and failed["progress"]["done"] == 0
        assert_healthy(client)


def test_cancel_while_workers_load_leaks_none(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with TestClient(create_app(make_settings(data_dir, backend="process"))) as client:
        # an import longer than the wait below: a worker gone by then was killed, not done importing
        slow_import = "import time\ntime.sleep(60)\n\ndef evaluate(inputs, outputs, trace):\n    return 1\n"
        ev = create_evaluator(client, slow_import)
        time.sleep(0.2)
        job = start(client, ev["id"], rows=[{"i": i} for i in range(100)], parallelism=3)
        time.sleep(0.7)  # every lane is waiting for its worker to finish importing
        assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
        seen: list[object] = []

        def leaked_none() -> bool:  # killed workers take a moment to leave /proc (a loaded machine: longer)
            workers = client.get("/healthz").json()["workers"]
            alive = [p for top in _worker_tops(data_dir) for p in [top, *_descendants(top)]]
            seen[:] = [alive, workers]
            return bool(len(alive) <= 3 * (workers["total"] + workers["spares"]))  # unshare + init + harness a worker

        wait_until(leaked_none, 30, 0.1, what=lambda: f"no process beyond the counted workers': {seen}")
        assert_healthy(client)


def test_result_pages_are_bounded_in_bytes_and_offsets_in_range(client: TestClient) -> None:
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    print('x' * 400_000)\n    return 1\n")
    # each stored row is cut to max_stored_result_bytes (64 KiB): 300 of them pass a page's 16 MiB
    job = wait(client, start(client, ev["id"], rows=[{"i": i} for i in range(300)])["id"])
    assert job["status"] == "succeeded"
    page = client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 1000}).json()
    assert 0 < len(page["data"]) < 300 and page["next_offset"] == len(page["data"])  # ended early: 16 MiB
    rest = client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 1000, "offset": page["next_offset"]}).json()
    assert [r["index"] for r in page["data"] + rest["data"]] == list(range(300)) and rest["next_offset"] is None
    assert client.get(f"/v1/jobs/{job['id']}/results", params={"offset": 2**63}).status_code == 422


def test_csv_export_neutralizes_formulas(client: TestClient) -> None:
    """Regression: error messages and dataset cells starting with = + - @ (or tab, CR) were exported raw,
    so a spreadsheet opening the results ran them. They get a leading quote (OWASP); numbers stay numbers."""
    code = (
        "def evaluate(inputs, outputs, trace):\n"
        "    if inputs['q'] == 'boom':\n        raise ValueError('=HYPERLINK(\"http://x\",\"click\")')\n"
        "    return {'score': -0.5}\n"
    )
    ev = create_evaluator(client, code)
    rows = [{"q": "=1+2", "c": "+cmd|' /C calc'!A0"}, {"q": "boom", "c": "@SUM(A1)"}, {"q": "\tx", "c": "-2"}]
    job = start(client, ev["id"], rows=rows)
    wait(client, job["id"])
    text = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"}).text
    table = list(csv.DictReader(io.StringIO(text)))
    assert [r["q"] for r in table] == ["'=1+2", "boom", "'\tx"]
    assert [r["c"] for r in table] == ["'+cmd|' /C calc'!A0", "'@SUM(A1)", "-2"]
    assert table[1]["error_message"].startswith("'=HYPERLINK(")
    assert table[0]["score"] == "-0.5"  # a number, not text
    assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for r in table for cell in r.values())


def test_a_carriage_return_inside_a_cell_cannot_start_a_formula_row(client: TestClient) -> None:
    """Regression (found by the attack pass): a CR inside a cell was written unquoted, so a reader
    breaking lines on CR started a new row whose first cell was a formula. Records end in CRLF and
    any cell holding a CR or LF is quoted."""
    code = "def evaluate(inputs, outputs, trace):\n    raise ValueError(inputs['q'])\n"
    ev = create_evaluator(client, code)
    job = start(client, ev["id"], rows=[{"q": "harmless\r=cmd|' /C calc'!A0"}])
    wait(client, job["id"])
    text = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"}).text
    for newline in (None, ""):  # universal newlines (CR breaks lines) and csv's own
        rows = list(csv.reader(io.StringIO(text, newline=newline)))
        assert len(rows) == 2, rows  # the header and one record
        assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)


def test_a_mapping_the_interface_ignores_is_a_job_warning(client: TestClient) -> None:
    evaluator = create_evaluator(client, "def main(completion):\n    return {'score': 1.0}\n")
    rows = [{"outputs": "a", "params": {"t": 1}}]
    job = start(client, evaluator["id"], rows=rows, field_mapping={"app_params": "params"})
    assert any(w.startswith("app_params is ignored by the 'main' interface") for w in job["warnings"])
    assert not start(client, evaluator["id"], rows=rows)["warnings"]


def test_ndjson_results_are_compact_json_throughout(client: TestClient) -> None:
    """Regression: each line mixed compact JSON with spaced JSON (the fields shared by every row)."""
    evaluator = create_evaluator(client, SCORED)
    job = wait(client, start(client, evaluator["id"], rows=[{"expected": "a", "outputs": "a"}])["id"])
    lines = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"}).text.splitlines()
    assert lines and all(line == json.dumps(json.loads(line), separators=(",", ":")) for line in lines)


# -- deleting --------------------------------------------------------------------------------


def test_deleting_a_running_job_cancels_it_and_removes_it_with_its_results_and_inline_rows(
    client: TestClient,
) -> None:
    ev = create_evaluator(
        client, "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.02)\n    return 1\n"
    )
    job = start(client, ev["id"], rows=[{"i": i} for i in range(5000)])
    wait(client, job["id"], until=lambda j: j["progress"]["done"] >= 20)
    inline = client.get(f"/v1/datasets/{job['dataset_id']}")
    assert inline.status_code == 200
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert client.get(f"/v1/jobs/{job['id']}/results").status_code == 404
    assert client.get(f"/v1/datasets/{job['dataset_id']}").status_code == 404  # its own rows went with it
    assert job["id"] not in {j["id"] for j in client.get("/v1/jobs").json()["data"]}
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 404
    assert_healthy(client)


def test_a_dataset_jobs_use_is_a_409_until_they_are_deleted(client: TestClient) -> None:
    ev = create_evaluator(client, SCORED)
    # (rows of SCORED's columns: the rows were {"inputs": {...}}, a KeyError on every row, which "succeeded")
    dataset = upload(client, jsonl([{"expected": "a", "outputs": "a"}] * 3))
    job = start(client, ev["id"], dataset_id=dataset["id"])
    assert wait(client, job["id"])["status"] == "succeeded"
    refused = client.delete(f"/v1/datasets/{dataset['id']}")
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "Conflict"
    assert job["id"] in refused.json()["error"]["message"]
    assert client.get(f"/v1/jobs/{job['id']}/results").status_code == 200  # nothing was removed
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 200  # an upload outlives its jobs
    assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 404
    assert dataset["id"] not in {d["id"] for d in client.get("/v1/datasets").json()["data"]}
    assert client.delete("/v1/datasets/ds_nope").status_code == 404
