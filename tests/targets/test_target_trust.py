"""A model-target job on a started service never holds the service, never keeps the key, and never looks
green when nothing was generated (issues 47.2, 47.3, 48.2, 48.4): hostile prompt templates, an endpoint
echoing the key in its answers, a model refusing every call, a template naming a column no row has."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, create_engine, select

from evaluator_host.api import create_app
from evaluator_host.store.schema import normalized_url
from evaluator_host.targets.generate import PROBE_ROWS, REFUSALS_TO_STOP
from tests.support.backends import BACKENDS, postgres_only
from tests.support.llm_server import LLMServer, llm_server
from tests.support.service import assert_healthy, make_settings

T = TypeVar("T")
KEY = "sk-echoed-key-7c1e9a4b2d"
CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'details': {'outputs': outputs}}\n"
# what a hostile row does: a nested loop over strings the template made, or a value of 400,000,000 characters
HOSTILE = (
    "{% if kind == 'loop' %}{% for a in question ~ '' %}{% for b in question ~ '' %}{% for c in question ~ '' %}"
    "{% endfor %}{% endfor %}{% endfor %}{% elif kind == 'bomb' %}{{ question|replace('', question) }}{% endif %}"
    "Q: {{ question }}"
)


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    with llm_server() as server:
        yield server


@pytest.fixture(scope="module", params=[*BACKENDS, pytest.param("postgres", marks=[postgres_only])])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = request.getfixturevalue("postgres").database() if request.param == "postgres" else None
    settings = make_settings(
        tmp_path_factory.mktemp("trust"),
        backend="process" if request.param == "postgres" else request.param,
        database_url=url,
        egress_hosts={"llm.test": "127.0.0.1"},
        target_workspace_concurrency=16,
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _answered(call: Callable[[], T], what: str, timeout: float = 120.0) -> T:
    """``call()``'s answer, waited on from another thread: a service whose loop is held never answers."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout)
    except FutureTimeout:
        pytest.fail(f"the service did not answer {what}: its event loop is held")
    finally:
        pool.shutdown(wait=False)


def _evaluator(client: TestClient) -> str:
    created = client.post("/v1/evaluators", json={"name": "judge", "language": "python", "code": CODE})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _target(llm: LLMServer, **extra: Any) -> dict[str, Any]:
    return {"base_url": f"http://llm.test:{llm.port}/v1", "model": "m", "prompt": "Q: {{ question }}", **extra}


def _finished(client: TestClient, job_id: str) -> dict[str, Any]:
    def wait() -> dict[str, Any]:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}).json()
        return job

    job = _answered(wait, "the job's state")
    assert job["status"] not in ("queued", "running"), job
    return job


def _peak_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def test_a_hostile_template_never_holds_the_service_and_its_rows_get_clear_errors(
    client: TestClient, llm: LLMServer
) -> None:
    """47.2: rows whose prompt would loop 2.7e13 times or make 400,000,000 characters are row errors saying
    which bound; the service answers /healthz meanwhile (waited on, not timed); the value is refused before
    it is made (the process's peak memory, reset first, does not grow by it); the other rows are generated."""
    evaluator = _evaluator(client)
    rows = [
        {"question": "first", "kind": "plain"},
        {"question": "x" * 30_000, "kind": "loop"},
        {"question": "y" * 20_000, "kind": "bomb"},
        {"question": "last", "kind": "plain"},
    ]
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak_kib()
    created = client.post(
        "/v1/jobs", json={"evaluator_id": evaluator, "rows": rows, "target": _target(llm, prompt=HOSTILE)}
    )
    assert created.status_code == 202, created.text
    assert _answered(lambda: client.get("/healthz").json(), "/healthz")["status"] == "ok"
    job = _finished(client, created.json()["id"])
    assert job["progress"] == {"total": 4, "done": 4, "failed": 2, "cached": 0}, job
    data = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
    errors = [item["result"].get("error") or {} for item in data]
    assert errors[1]["type"] == "GenerationError" and "iterates more than 1,000,000 times" in errors[1]["message"]
    assert errors[2]["type"] == "GenerationError" and "more than 1,048,576 characters" in errors[2]["message"]
    assert [item["result"]["status"] for item in data] == ["ok", "error", "error", "ok"]
    assert llm.received["Q: first"] == 1 and llm.received["Q: last"] == 1 and llm.calls() == 2
    assert _peak_kib() - before < 128 * 1024, "the 400,000,000-character value was made"
    assert_healthy(client)


def test_a_template_over_a_bound_on_the_first_row_is_refused_at_creation(client: TestClient, llm: LLMServer) -> None:
    evaluator = _evaluator(client)
    template = "{% for a in question * 3 %}{% for b in question * 3 %}{% endfor %}{% endfor %}"
    body = {"evaluator_id": evaluator, "rows": [{"question": "q" * 2000}], "target": _target(llm, prompt=template)}
    refused = client.post("/v1/jobs", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "TargetError", refused.text
    assert "first row: the template iterates more than 1,000,000 times" in refused.json()["error"]["message"]
    assert llm.calls() == 0


def test_a_template_over_a_bound_on_every_row_fails_the_job_after_three_of_them(
    client: TestClient, llm: LLMServer
) -> None:
    """The first row lacks the column (a row error, so creation lets it through); every other row passes a bound:
    the job stops after three of them (and the rows already rendering), ``failed`` with the bound, instead of
    rendering every row to its bound."""
    evaluator = _evaluator(client)
    template = "{% for a in question ~ '' %}{% for b in question ~ '' %}{% endfor %}{% endfor %}Q: {{ question }}"
    rows = [{"other": 1}] + [{"question": "q" * 2000} for _ in range(30)]
    created = client.post(
        "/v1/jobs", json={"evaluator_id": evaluator, "rows": rows, "target": _target(llm, prompt=template)}
    )
    assert created.status_code == 202, created.text
    job = _finished(client, created.json()["id"])
    assert job["status"] == "failed" and job["error"]["type"] == "TargetError", job
    assert "on 3 rows before rendering any" in job["error"]["message"]
    assert "iterates more than 1,000,000 times" in job["error"]["message"]
    # at most PROBE_ROWS at once before any rendered; each refusal before the third lets one more start, as did
    # the first row's (a row error, not a refusal)
    assert job["progress"]["done"] <= PROBE_ROWS + REFUSALS_TO_STOP and llm.calls() == 0
    assert_healthy(client)


def test_a_key_the_endpoint_echoes_in_its_answers_is_stored_and_answered_nowhere(
    client: TestClient, llm: LLMServer
) -> None:
    """47.3: the endpoint puts the Authorization header into each completion's text; the generation, the
    evaluator's outputs, the stored result, every export and the database hold ``[secret NAME]`` instead."""
    assert client.put("/v1/secrets/ECHO_KEY", json={"value": KEY}).status_code == 204
    llm.echo_auth = True
    rows = [{"question": f"echo-{i}"} for i in range(3)]
    body = {"evaluator_id": _evaluator(client), "rows": rows, "target": _target(llm, api_key_secret="ECHO_KEY")}
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    job = _finished(client, created.json()["id"])
    assert job["status"] == "succeeded" and job["progress"]["failed"] == 0, job
    assert all(h["Authorization"] == f"Bearer {KEY}" for h in llm.headers)  # the endpoint got it, and echoed it
    answers = [client.get(f"/v1/jobs/{job['id']}").text]
    for params in ({}, {"format": "ndjson"}, {"format": "csv"}):
        answers.append(client.get(f"/v1/jobs/{job['id']}/results", params=params).text)
    first = client.get(f"/v1/jobs/{job['id']}/results").json()["data"][0]
    assert first["generation"]["text"] == "A: Q: echo-0 (auth: Bearer [secret ECHO_KEY])", first
    assert first["result"]["details"]["details"]["outputs"] == first["generation"]["text"]  # what the evaluator saw
    assert all(KEY not in answer for answer in answers) and "[secret ECHO_KEY]" in answers[3]
    replayed = client.post("/v1/results/replay", json={"job_id": job["id"], "index": 0})
    assert replayed.status_code == 200 and KEY not in replayed.text, replayed.text
    settings = client.app.state.settings  # type: ignore[attr-defined]
    if settings.database_url:  # PostgreSQL: every row of every table, as text
        engine = create_engine(normalized_url(settings.resolved_database_url))
        tables = MetaData()
        tables.reflect(engine)
        with engine.connect() as db:
            stored = "\n".join(repr(row) for table in tables.sorted_tables for row in db.execute(select(table)))
        engine.dispose()
        assert "ECHO_KEY" in stored and KEY not in stored
    data_dir = Path(settings.data_dir)
    held = [
        p for p in data_dir.rglob("*") if p.is_file() and p.name != "service.lock" and KEY.encode() in p.read_bytes()
    ]
    assert held == []


@pytest.mark.parametrize(
    ("refusal", "extra", "named"),
    [
        (
            401,
            {"api_key_secret": "WRONG_KEY"},
            ["HTTP 401", "secret 'WRONG_KEY' is refused", "PUT /v1/secrets/WRONG_KEY"],
        ),
        (403, {}, ["HTTP 403", "no key was sent", "target.api_key_secret"]),
        (404, {"model": "no-such-model"}, ["HTTP 404", "model 'no-such-model' does not exist"]),
    ],
)
def test_a_model_that_refuses_every_call_fails_the_job_after_a_few_calls(
    client: TestClient, llm: LLMServer, refusal: int, extra: dict[str, Any], named: list[str]
) -> None:
    """48.2: 200 rows against a wrong key (401), a forbidden endpoint (403) or a model that does not exist
    (404): the job is ``failed`` after at most 10 calls, its error naming the host, the status and the secret
    used (never its value, which the 401 echoes back); the rows so far are kept."""
    if refusal == 404:
        llm.models = {"m"}
    else:
        llm.status_all = refusal
    assert client.put("/v1/secrets/WRONG_KEY", json={"value": KEY}).status_code == 204
    rows = [{"question": f"refused-{i}"} for i in range(200)]
    body = {"evaluator_id": _evaluator(client), "rows": rows, "target": _target(llm, concurrency=16, **extra)}
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    job = _finished(client, created.json()["id"])
    assert job["status"] == "failed" and job["error"]["type"] == "TargetError", job
    message = job["error"]["message"]
    assert f"llm.test:{llm.port}" in message and all(part in message for part in named), message
    assert KEY not in message and KEY not in client.get(f"/v1/jobs/{job['id']}/results").text
    assert 1 <= llm.calls() <= 10 and job["usage"]["calls"] == llm.calls(), (llm.calls(), job)
    assert job["progress"]["done"] == llm.calls() and job["progress"]["failed"] == llm.calls()  # the rows are kept


def test_a_template_naming_a_column_no_row_has_is_a_422_with_a_did_you_mean(client: TestClient, llm: LLMServer) -> None:
    """48.4: checked once at creation against the dataset's columns, not per row."""
    rows = [{"question": "q1", "answer": "a"}, {"question": "q2", "answer": "b"}]
    body = {"evaluator_id": _evaluator(client), "rows": rows, "target": _target(llm, prompt="Q: {{ questoin }}")}
    refused = client.post("/v1/jobs", json=body)
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "FieldMappingError", refused.text
    message = refused.json()["error"]["message"]
    assert "{{ questoin }}" in message and "did you mean `question`?" in message and "'answer'" in message
    assert llm.calls() == 0


def test_a_missing_key_secret_is_named_as_the_targets(client: TestClient, llm: LLMServer) -> None:
    body = {
        "evaluator_id": _evaluator(client),
        "rows": [{"question": "q"}],
        "target": _target(llm, api_key_secret="NOPE"),
    }
    refused = client.post("/v1/jobs", json=body)
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "SecretError", refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("target.api_key_secret names secret(s) this workspace does not have: NOPE"), message
    assert "evaluator" not in message
