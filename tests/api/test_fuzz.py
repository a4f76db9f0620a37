"""The whole API fuzzed from its own OpenAPI schema (Schemathesis): no 5xx, every 4xx in the envelope.

The service is the real one (``evaluator-host serve``, process backend) answering over HTTP,
so the fast path (``api/fastpath.py``, in front of FastAPI) sees every generated request the
way a client's would reach it. Each operation gets a bounded number of generated requests,
valid ones (positive) and invalid ones (negative), some aimed at real evaluators, datasets and
jobs so the routes get past their 404. Two variants: no API keys, and API keys on (every
request carries the key; one request per operation without it must be the 401 envelope).
Package builds are refused fast and offline (pip without an index, npm offline): a pin is
still validated, and an install that cannot happen is the 422 ``BuildError``.
``EVALUATOR_HOST_FUZZ_EXAMPLES`` sets the examples per operation and strategy (default 12).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from evaluator_host.api import create_app
from evaluator_host.errors import ErrorBody
from evaluator_host.settings import Settings
from evaluator_host.shared.bounds import INT64_MAX, INT64_MIN
from tests.support.service import serving

EXAMPLES = int(os.environ.get("EVALUATOR_HOST_FUZZ_EXAMPLES", "12"))
KEY = "fuzz-key"
CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs.get('correct_answer')\n"


@functools.cache
def _app_spec() -> dict[str, Any]:
    """The OpenAPI document the app builds (read without starting it): built once for the module (about half a
    second of CPU each time), read only."""
    return create_app(Settings(backend="process")).openapi()


def _operations() -> list[tuple[str, str]]:
    """(method, path) of every operation the app documents (read without starting it); deletes last. Each DELETE
    is aimed at resources of its own (:meth:`Fuzzed.fresh_ids`), so any order of the tests works too."""
    spec = _app_spec()
    found = [(method.upper(), path) for path, methods in spec["paths"].items() for method in methods]
    return sorted(found, key=lambda op: op[0] == "DELETE")


# Fields whose rules the schema cannot state (a secret's or a variable's name, a host:port, an entry point
# matching the code's interface): a generated value fails them about half the time, so the runnable strategy
# leaves them out (the other strategies fuzz them) and its every body reaches the evaluation
_UNRUNNABLE = frozenset({"secrets", "network"})
_UNRUNNABLE_SETTINGS = frozenset({"policy", "env", "entrypoint"})


def _runnable(case: Any) -> Any:
    """``case`` with a body that runs: valid Python code and no pins, the rest as generated (inputs, outputs,
    cases, settings...) but for the fields of ``_UNRUNNABLE`` and ``_UNRUNNABLE_SETTINGS``."""
    if isinstance(case.body, dict):
        body = {k: v for k, v in case.body.items() if k not in _UNRUNNABLE}
        case.body = {**body, "language": "python", "code": CODE, "packages": {}}
        if isinstance(case.body.get("settings"), dict):
            settings = case.body["settings"].items()
            case.body["settings"] = {k: v for k, v in settings if k not in _UNRUNNABLE_SETTINGS}
    return case


class Fuzzed:
    """A running service, its loaded schema, the auth headers to send, and ids of real resources."""

    def __init__(self, base_url: str, schema: Any, headers: dict[str, str], ids: dict[str, str]) -> None:
        self.base_url = base_url
        self.schema = schema
        self.spec: dict[str, Any] = httpx.get(f"{base_url}/openapi.json", headers=headers, timeout=30).json()
        self.headers = headers
        self.ids = ids
        self.statuses: dict[str, set[int]] = {}
        self.outcomes: dict[tuple[str, str], BaseException | None] = {}

    def fuzz(self, method: str, path: str) -> None:
        """Fuzz one operation once (see :func:`_fuzz`), whichever test asks first; raise its failure to each asker.

        The health test asks for every operation, so it proves the same thing in any order of the tests."""
        if (method, path) not in self.outcomes:
            try:
                _fuzz(self, method, path)
            except Exception as failure:  # kept, and raised to the operation's own test too
                self.outcomes[(method, path)] = failure
            else:
                self.outcomes[(method, path)] = None
        failure = self.outcomes[(method, path)]
        if failure is not None:
            raise failure

    def fresh_ids(self) -> dict[str, str]:
        """A new evaluator, dataset and job of their own: what a DELETE is aimed at, so the resources every other
        operation is aimed at exist whatever order the operations run in."""
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=30) as client:
            return _resources(client)


def _resources(client: httpx.Client) -> dict[str, str]:
    """A real evaluator, dataset and job the generated requests are aimed at (their ids by path parameter)."""
    evaluator = client.post("/v1/evaluators", json={"name": "fz", "language": "python", "code": CODE})
    assert evaluator.status_code == 201, evaluator.text
    rows = b'{"correct_answer": "a", "outputs": "a"}\n{"correct_answer": "b", "outputs": "c"}\n'
    dataset = client.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"})
    assert dataset.status_code == 201, dataset.text
    ids = {"evaluator_id": evaluator.json()["id"], "dataset_id": dataset.json()["id"]}
    job = client.post("/v1/jobs", json={**ids, "field_mapping": None})
    assert job.status_code == 202, job.text
    return {**ids, "job_id": job.json()["id"]}


@pytest.fixture(scope="module", params=["open", "keyed"])
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    root = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    (root / "wheels").mkdir()
    env = {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(root / "wheels"),
        "npm_config_offline": "true",
        "npm_config_cache": str(root / "npm-cache"),
        "EVALUATOR_HOST_MAX_DATASET_BYTES": str(1 << 20),
    }
    headers = {}
    if request.param == "keyed":
        env["EVALUATOR_HOST_API_KEYS"] = KEY
        headers = {"Authorization": f"Bearer {KEY}"}
    with serving(root / "data", "process", env=env) as (client, _proc):
        client.headers.update(headers)
        ids = _resources(client)
        base_url = str(client.base_url)
        yield Fuzzed(base_url, schemathesis.openapi.from_url(f"{base_url}/openapi.json"), headers, ids)


def _header(response: Any, name: str) -> str:
    """One header of a Schemathesis response (its headers are lists) or an httpx one."""
    for key, value in response.headers.items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) else value)
    return ""


def _check(response: Any, what: Callable[[], str]) -> None:
    """No 5xx, and every 4xx the error envelope; ``what`` names the request in a failure's message (made only
    then: a curl command per passing request cost more than the check)."""
    status = response.status_code
    assert status < 500, f"{what()}: {status} {response.text[:2000]}"
    if status >= 400:
        assert _header(response, "content-type").startswith("application/json"), (what(), response.text[:500])
        ErrorBody.model_validate(response.json())  # {"error": {"type", "message", "line", "column", ...}}


@pytest.mark.parametrize(("method", "path"), _operations(), ids=lambda v: str(v))
def test_every_answer_is_below_500_and_every_error_is_the_envelope(fuzzed: Fuzzed, method: str, path: str) -> None:
    fuzzed.fuzz(method, path)


def _fuzz(fuzzed: Fuzzed, method: str, path: str) -> None:
    """Send one operation its generated requests: no answer a 5xx, every error the envelope (and, keys on, every
    request without the key the 401). A DELETE is aimed at resources of its own (:meth:`Fuzzed.fresh_ids`)."""
    operation = fuzzed.schema[path][method]
    ids = fuzzed.fresh_ids() if method == "DELETE" else fuzzed.ids
    known = {name: value for name, value in ids.items() if "{" + name + "}" in path}
    strategies = [operation.as_strategy(generation_mode=mode) for mode in GenerationMode]
    if known:  # aimed at real resources too, so the route gets past its 404
        strategies += [operation.as_strategy(generation_mode=mode, path_parameters=known) for mode in GenerationMode]
    if method == "POST" and path in ("/v1/evaluate", "/v1/evaluators"):  # code that runs, the rest fuzzed
        strategies.append(operation.as_strategy().map(_runnable))

    @settings(
        max_examples=EXAMPLES * len(strategies),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(strategies))
    def run(case: Any) -> None:
        response = case.call(headers=fuzzed.headers)
        _check(response, lambda: f"{method} {path} {case.as_curl_command(headers=fuzzed.headers)}")
        fuzzed.statuses.setdefault(f"{method} {path}", set()).add(response.status_code)
        if fuzzed.headers and path.startswith("/v1"):  # keys on: the same request without one is the 401
            anonymous = case.call()
            _check(anonymous, lambda: f"{method} {path} without a key {case.as_curl_command()}")
            assert anonymous.status_code == 401, anonymous.text

    run()


# Integers past what SQL stores (signed 64-bit): each sent alone, in place of one integer of a valid request
HUGE = (10**30, -(10**30), 2**63)


def _resolve(schema: Any, spec: dict[str, Any]) -> dict[str, Any]:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema if isinstance(schema, dict) else {}


def _alternatives(schema: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A schema's alternatives (``anyOf``/``oneOf``/``allOf`` flattened), each resolved."""
    schema = _resolve(schema, spec)
    nested = [*schema.get("anyOf", []), *schema.get("oneOf", []), *schema.get("allOf", [])]
    return [schema] + [alt for item in nested for alt in _alternatives(item, spec)]


def _kinds(schema: Any, spec: dict[str, Any]) -> set[str]:
    return {str(alt["type"]) for alt in _alternatives(schema, spec) if "type" in alt}


def _integer_slots(value: Any, schema: Any, spec: dict[str, Any], path: tuple[Any, ...] = ()) -> list[Any]:
    """Where an integer may go in ``value`` (a body valid for ``schema``): ``(path, only_integer)`` for every
    integer-typed property of every object in it, present or not (``only_integer``: no number is accepted
    there either, so a huge integer must be refused), recursing into what is present."""
    slots: list[Any] = []
    alternatives = _alternatives(schema, spec)
    if isinstance(value, dict):
        properties: dict[str, Any] = {}
        for alt in alternatives:
            properties.update(alt.get("properties", {}))
        for name, prop in properties.items():
            kinds = _kinds(prop, spec)
            if "integer" in kinds:
                slots.append(((*path, name), "number" not in kinds))
            if name in value:
                slots += _integer_slots(value[name], prop, spec, (*path, name))
    elif isinstance(value, list) and value:
        for alt in alternatives:
            if isinstance(alt.get("items"), dict):
                slots += _integer_slots(value[0], alt["items"], spec, (*path, 0))
    return slots


def _with(value: Any, path: tuple[Any, ...], new: int) -> Any:
    """A copy of ``value`` with ``new`` at ``path``."""
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _with(copy[path[0]] if len(path) > 1 else None, path[1:], new)
    return copy


@pytest.mark.parametrize(("method", "path"), _operations(), ids=lambda v: str(v))
def test_an_integer_past_64_bits_in_any_field_or_parameter_is_a_4xx_never_a_500(
    fuzzed: Fuzzed, method: str, path: str
) -> None:
    """Regression (issue 47, 9): ``POST /v1/results/replay`` with ``index`` 10**30 answered 500 (SQLite's
    integer overflow). Every integer of every route's body and query, one at a time in an otherwise valid
    request, set past the signed 64-bit range: 4xx (the 422 naming it), never a 500."""
    spec = fuzzed.spec
    operation = fuzzed.schema[path][method]
    document = spec["paths"][path][method.lower()]
    body_schema = next(iter(document.get("requestBody", {}).get("content", {}).values()), {}).get("schema")
    query = [p for p in document.get("parameters", []) if p["in"] == "query" and "integer" in _kinds(p["schema"], spec)]
    if body_schema is None and not query:
        pytest.skip("no integer in its body or query")
    known = {name: value for name, value in fuzzed.ids.items() if "{" + name + "}" in path}
    strategy = operation.as_strategy(generation_mode=GenerationMode.POSITIVE, path_parameters=known or None)
    tried: list[str] = []

    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        body = case.body if isinstance(case.body, dict) else None
        if body is not None:  # aimed at real resources (a replay's job), so the integer reaches its query
            body = {**body, **{name: value for name, value in fuzzed.ids.items() if name in body}}
        changes: list[tuple[str, Any, bool]] = []
        if body is not None and body_schema is not None:
            for slot, only in _integer_slots(body, body_schema, spec):
                changes += [("body", slot, only)]
        changes += [("query", (p["name"],), "number" not in _kinds(p["schema"], spec)) for p in query]
        query_before = case.query
        for where, slot, only in changes:
            for huge in HUGE:
                if where == "body":
                    case.body = _with(body, slot, huge)
                else:
                    case.query = {**(case.query or {}), slot[0]: str(huge)}
                response = case.call(headers=fuzzed.headers)
                what = f"{method} {path} {where} {slot}={huge}"
                _check(response, lambda what=what: f"{what}: {case.as_curl_command(headers=fuzzed.headers)}")
                if only:
                    assert 400 <= response.status_code < 500, (
                        f"{what}: {case.as_curl_command(headers=fuzzed.headers)}: {response.status_code} "
                        f"{response.text[:500]}"
                    )
                tried.append(f"{where} {slot}")
            case.body, case.query = body, query_before

    run()
    if path == "/v1/results/replay":
        assert "body ('index',)" in tried, tried


def _integers(schema: Any, spec: dict[str, Any], where: str, seen: frozenset[str] = frozenset()) -> list[Any]:
    """``(where, minimum, maximum)`` of every integer in ``schema`` (following references once each)."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return [] if name in seen else _integers(spec["components"]["schemas"][name], spec, name, seen | {name})
    found = []
    if schema.get("type") == "integer":
        found.append((where, schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")))
    for key in ("anyOf", "oneOf", "allOf"):
        for alt in schema.get(key, []):
            found += _integers(alt, spec, where, seen)
    for name, prop in schema.get("properties", {}).items():
        found += _integers(prop, spec, f"{where}.{name}", seen)
    for key in ("items", "additionalProperties"):
        found += _integers(schema.get(key), spec, f"{where}[]", seen)
    return found


def test_every_integer_a_request_carries_is_bounded_to_64_bits_in_the_schema() -> None:
    """The schema-wide rule (issue 47, 9): every integer of every request body and parameter has a minimum
    and a maximum within SQL's signed 64-bit range (``evaluator_host.shared.bounds``), so a larger one is
    the framework's 422 before any handler or query sees it."""
    spec = _app_spec()
    found = []
    for path, methods in spec["paths"].items():
        for method, document in methods.items():
            for parameter in document.get("parameters", []):
                where = f"{method.upper()} {path} {parameter['in']}:{parameter['name']}"
                found += _integers(parameter.get("schema"), spec, where)
            for content in document.get("requestBody", {}).get("content", {}).values():
                found += _integers(content.get("schema"), spec, f"{method.upper()} {path} body")
    unbounded = [
        item
        for item in found
        if item[1] is None or item[2] is None or float(item[1]) < float(INT64_MIN) or float(item[2]) > float(INT64_MAX)
    ]
    assert found and not unbounded, unbounded
    assert any(where.endswith("ReplayRequest.index") for where, _, _ in found), found


def test_the_fuzzed_routes_are_every_documented_operation(fuzzed: Fuzzed) -> None:
    """The schema the fuzzer loads over HTTP is the app's whole API (nothing dropped as unparsable)."""
    loaded = [op for op in fuzzed.schema.get_all_operations()]
    assert all(op.ok() for op in loaded)
    assert {(op.ok().method.upper(), op.ok().path) for op in loaded} == set(_operations())


def test_the_fuzzed_service_is_healthy_afterwards(fuzzed: Fuzzed) -> None:
    for method, path in _operations():  # every operation fuzzed first, whatever order the tests ran in
        try:
            fuzzed.fuzz(method, path)
        except Exception:  # noqa: S112 - an operation's failure is its own test's; here: health after all of them
            continue
    reached = {op for op, statuses in fuzzed.statuses.items() if any(200 <= s < 300 for s in statuses)}
    assert {"POST /v1/evaluate", "POST /v1/evaluators", "GET /v1/jobs/{job_id}"} <= reached, fuzzed.statuses
    with httpx.Client(base_url=fuzzed.base_url, headers=fuzzed.headers, timeout=30) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        answer = client.post(
            "/v1/evaluate",
            json={"language": "python", "code": CODE, "inputs": {"correct_answer": "x"}, "outputs": "x"},
        )
        assert answer.status_code == 200 and answer.json()["score"] == 1.0, answer.text
