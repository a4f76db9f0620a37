"""POST /v1/inspect (what the playground shows while typing), GET /v1/datasets/{id}/rows, and the page itself."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api.routes.web import WEB_DIST

GOOD = "import requests\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"


def inspect(client: TestClient, **body: object) -> dict:  # type: ignore[type-arg]
    response = client.post("/v1/inspect", json={"language": "python", **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_valid_definition_answers_its_interface_capabilities_pins_and_unbuilt_runtime(
    process_client: TestClient,
) -> None:
    found = inspect(process_client, code=GOOD, packages={"Requests": "2.32.3"})
    assert found["ok"] is True and found["errors"] == []
    assert (found["interface"], found["entrypoint"], found["line"]) == ("evaluate", "evaluate", 3)
    assert found["capabilities"]["network"] == [{"line": 1, "detail": "import requests"}]
    assert found["pins"] == [
        {"name": "Requests", "version": "2.32.3", "ok": True, "normalized": "requests", "message": None}
    ]
    assert found["runtime"]["built"] is False and found["runtime"]["id"].startswith("python-")
    assert found["policy"] == "standard" and found["warnings"] == []


def test_every_problem_is_reported_with_its_place_never_raised(process_client: TestClient) -> None:
    found = inspect(process_client, code="def evaluate(inputs, outputs, trace):\n    return (\n", packages=["six>=1"])
    assert found["ok"] is False and found["interface"] is None
    syntax = next(e for e in found["errors"] if e["type"] == "SyntaxError")
    assert (syntax["line"], syntax["column"]) == (2, 12)
    pin = next(e for e in found["errors"] if e["type"] == "PackageSpecError")
    assert pin["package"] == "six>=1"
    assert found["pins"][0]["ok"] is False and "exact pin" in found["pins"][0]["message"]
    assert found["runtime"] is None


def test_each_pin_gets_its_own_verdict(process_client: TestClient) -> None:
    found = inspect(process_client, code=GOOD, packages={"numpy": "1.26.4", "pandas": "latest", "six": "1.16.0"})
    assert [p["ok"] for p in found["pins"]] == [True, False, True]
    assert "'latest' is not an exact version" in found["pins"][1]["message"]


def test_unpinned_imports_and_the_policy_are_reported(process_client: TestClient) -> None:
    found = inspect(process_client, code=GOOD, settings={"policy": "restricted"})
    assert found["policy"] == "restricted"
    assert any("'requests'" in w for w in found["warnings"])
    js = inspect(process_client, language="javascript", code="function evaluate(a, b) { return 1 }\n")
    assert [e["type"] for e in js["errors"]] == ["InterfaceError"] and js["errors"][0]["line"] == 1


def test_typescript_errors_carry_the_users_line_and_column(process_client: TestClient) -> None:
    found = inspect(
        process_client,
        language="typescript",
        code="export function evaluate(i: any, o: any, t: any) {\n  return (\n}\n",
    )
    assert found["errors"][0]["type"] == "SyntaxError" and found["errors"][0]["line"] == 3


def test_oversized_code_is_one_error_and_nothing_is_scanned(process_client: TestClient) -> None:
    limit = process_client.app.state.settings.max_code_bytes  # type: ignore[attr-defined]
    found = inspect(process_client, code="#" * (limit + 1))
    assert [e["type"] for e in found["errors"]] == ["LimitError"] and found["capabilities"] == {}


def test_inspecting_is_cheap_enough_to_run_on_every_keystroke(process_client: TestClient) -> None:
    inspect(process_client, code=GOOD)
    started = time.perf_counter()
    for i in range(20):
        inspect(process_client, code=GOOD + f"# edit {i}\n")
    assert (time.perf_counter() - started) / 20 < 0.1  # new text each time: a parse and a scan, no cache


def test_dataset_rows_are_paged_in_upload_order(process_client: TestClient) -> None:
    body = "\n".join(f'{{"i": {i}}}' for i in range(25))
    dataset = process_client.post("/v1/datasets", content=body, headers={"content-type": "application/jsonl"}).json()
    page = process_client.get(f"/v1/datasets/{dataset['id']}/rows", params={"offset": 20, "limit": 3}).json()
    assert [r["index"] for r in page["data"]] == [20, 21, 22] and page["data"][0]["row"] == {"i": 20}
    assert (page["next_offset"], page["total"]) == (23, 25)
    last = process_client.get(f"/v1/datasets/{dataset['id']}/rows", params={"offset": 23}).json()
    assert len(last["data"]) == 2 and last["next_offset"] is None
    assert process_client.get("/v1/datasets/ds_nope/rows").status_code == 404


@pytest.mark.skipif(not (WEB_DIST / "index.html").is_file(), reason="the playground is not built (make install)")
def test_the_page_and_its_bundle_are_served_same_origin_with_a_strict_policy(process_client: TestClient) -> None:
    page = process_client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert '<script type="module" src="/assets/app.js">' in page.text
    script = process_client.get("/assets/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    packed = process_client.get("/assets/app.js", headers={"accept-encoding": "gzip"})
    assert packed.headers["content-encoding"] == "gzip" and packed.content == script.content  # httpx unpacks it
    assert process_client.get("/assets/../../pyproject.toml").status_code == 404
    assert process_client.get("/assets/.hidden").status_code == 404
    assert process_client.get("/v1/inspect").status_code == 405  # the API keeps its own answers
