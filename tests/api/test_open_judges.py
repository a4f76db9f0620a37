"""LLM judges on an open service, on each backend (issue 48, 5 and 6): ``EVALUATOR_HOST_NETWORK_ALLOW`` is
the default workspace's allowlist when no key exists, and a definition's ``settings.env`` reaches the worker
as plain environment variables (Python, JavaScript, TypeScript), stored, shown and never redacted.

The model API is :mod:`tests.support.llm_server` on loopback, named ``llm.local`` for the egress proxy only
(``EGRESS_HOSTS``), as the other egress tests reach theirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.errors import EgressError
from evaluator_host.sandbox.process.isolation import probe
from tests.support.backends import BACKENDS
from tests.support.llm_server import LLMServer, llm_server
from tests.support.service import make_settings

JUDGE_PY = """import json, os, urllib.request
def evaluate(inputs, outputs, trace):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": outputs}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request, timeout=20).read())
    said = answer["choices"][0]["message"]["content"]
    return {"score": 1.0 if said == "A: " + outputs else 0.0, "said": said, "model": os.environ["JUDGE_MODEL"]}
"""
JUDGE_JS = """export async function evaluate(inputs, outputs, trace) {
  const answer = await (await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {
    method: 'POST', headers: {'content-type': 'application/json'},
    body: JSON.stringify({model: 'm', messages: [{role: 'user', content: outputs}]}),
  })).json()
  const said = answer.choices[0].message.content
  return {score: said === 'A: ' + outputs ? 1 : 0, said, model: process.env.JUDGE_MODEL}
}
"""
JUDGE_TS = JUDGE_JS.replace("(inputs, outputs, trace)", "(inputs: unknown, outputs: string, trace: unknown)")
JUDGES = {"python": JUDGE_PY, "javascript": JUDGE_JS, "typescript": JUDGE_TS}


@pytest.fixture(scope="module")
def model_api() -> Iterator[LLMServer]:
    with llm_server() as server:
        yield server


@pytest.fixture(scope="module", params=BACKENDS)
def open_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model_api: LLMServer
) -> Iterator[tuple[TestClient, str]]:
    if request.param == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here: no egress to test")
    host = f"llm.local:{model_api.port}"
    settings = make_settings(
        tmp_path_factory.mktemp(f"open-{request.param}") / "data",
        backend=request.param,
        network_allow=host,  # as the environment gives it: one comma-separated string
        egress_hosts={"llm.local": "127.0.0.1"},
    )
    with TestClient(create_app(settings)) as client:
        yield client, host


@pytest.mark.parametrize("language", ["python", "javascript", "typescript"])
def test_an_open_service_allows_the_settings_hosts_and_settings_env_reaches_the_judge(
    open_service: tuple[TestClient, str], language: str
) -> None:
    client, host = open_service
    base_url = f"http://{host}/v1"
    body = {
        "language": language,
        "code": JUDGES[language],
        "network": [host],
        "settings": {"env": {"OPENAI_BASE_URL": base_url, "JUDGE_MODEL": "gpt-judge"}},
        "outputs": f"hello from {language}",
    }
    answer = client.post("/v1/evaluate", json=body)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["status"] == "ok", result
    assert result["score"] == 1.0
    # a plain variable is never redacted (a secret with that value would read "[secret NAME]")
    assert result["details"]["said"] == f"A: hello from {language}"
    assert result["details"]["model"] == "gpt-judge"
    assert not [w for w in result["warnings"] if "network" in w], result["warnings"]


def test_settings_env_is_stored_shown_and_a_new_revision_when_changed(open_service: tuple[TestClient, str]) -> None:
    client, host = open_service
    env = {"OPENAI_BASE_URL": f"http://{host}/v1", "JUDGE_MODEL": "one"}
    created = client.post(
        "/v1/evaluators",
        json={"name": "judge", "language": "python", "code": JUDGE_PY, "network": [host], "settings": {"env": env}},
    )
    assert created.status_code == 201, created.text
    evaluator = created.json()
    assert evaluator["settings"]["env"] == env and evaluator["revision"] == 1
    first = client.post(f"/v1/evaluators/{evaluator['id']}/evaluate", json={"outputs": "x"}).json()
    assert first["details"]["model"] == "one", first
    patched = client.patch(
        f"/v1/evaluators/{evaluator['id']}", json={"settings": {"env": {**env, "JUDGE_MODEL": "two"}}}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["revision"] == 2 and patched.json()["settings"]["env"]["JUDGE_MODEL"] == "two"
    # the same code, the new env: a worker loaded with the old one is never reused
    second = client.post(f"/v1/evaluators/{evaluator['id']}/evaluate", json={"outputs": "x"}).json()
    assert second["details"]["model"] == "two", second
    old = client.post(f"/v1/evaluators/{evaluator['id']}/evaluate", json={"outputs": "x", "revision": 1}).json()
    assert old["details"]["model"] == "one", old
    shown = client.get(f"/v1/evaluators/{evaluator['id']}/revisions").json()["data"]
    assert sorted(r["settings"]["env"]["JUDGE_MODEL"] for r in shown) == ["one", "two"]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"PATH": "/tmp"}, "the sandbox's own"),
        ({"HTTP_PROXY": "http://evil:1"}, "the sandbox's own"),
        ({"HOME": "/"}, "the sandbox's own"),
        ({"LD_PRELOAD": "/tmp/x.so"}, "the sandbox's own"),
        ({"NODE_OPTIONS": "--require /tmp/x"}, "the sandbox's own"),
        ({"lower_case": "x"}, "not a variable name"),
        ({"BAD-NAME": "x"}, "not a variable name"),
        ({"BIG": "x" * 5000}, "at most 4096 characters"),
        ({f"V{i}": "x" for i in range(51)}, "at most 50 variables"),
        ({f"V{i}": "x" * 4000 for i in range(5)}, "bytes of names and values"),
        ({"NUL": "a\x00b"}, "NUL"),
    ],
)
def test_settings_env_refuses_the_sandboxs_names_and_sizes_past_its_bounds(
    open_service: tuple[TestClient, str], env: dict[str, str], says: str
) -> None:
    client, _host = open_service
    body = {"language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n"}
    answer = client.post("/v1/evaluate", json={**body, "settings": {"env": env}})
    assert answer.status_code == 422, answer.text
    assert says in answer.text
    assert client.post("/v1/evaluate", json=body).json()["status"] == "ok"  # healthy after


def test_a_name_cannot_be_both_a_secret_and_a_plain_variable(open_service: tuple[TestClient, str]) -> None:
    client, _host = open_service
    body: dict[str, Any] = {
        "language": "python",
        "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n",
        "secrets": ["OPENAI_API_KEY"],
        "settings": {"env": {"OPENAI_API_KEY": "sk-plain"}},
    }
    answer = client.post("/v1/evaluate", json=body)
    assert answer.status_code == 422 and "both a secret and a plain variable" in answer.text


def test_a_host_the_setting_does_not_name_is_still_refused(open_service: tuple[TestClient, str]) -> None:
    client, _host = open_service
    answer = client.post(
        "/v1/evaluate",
        json={"language": "python", "code": JUDGE_PY, "network": ["elsewhere.example.com:443"]},
    )
    assert answer.status_code == 422 and "elsewhere.example.com:443" in answer.text
    assert "EVALUATOR_HOST_NETWORK_ALLOW" in answer.text


def test_on_a_keyed_service_the_setting_is_the_default_workspaces_starting_list(tmp_path: Path) -> None:
    admin = "operator-key"
    settings = make_settings(
        tmp_path / "data", backend="process", admin_key=admin, api_keys="default-key", network_allow="llm.local:8080"
    )
    op = {"Authorization": f"Bearer {admin}"}
    with TestClient(create_app(settings)) as client:
        shown = client.get("/v1/workspaces/ws_default", headers=op).json()
        assert shown["network_allow"] == ["llm.local:8080"]
        patched = client.patch("/v1/workspaces/ws_default", json={"network_allow": ["api.openai.com:443"]}, headers=op)
        assert patched.json()["network_allow"] == ["api.openai.com:443"]
    with TestClient(create_app(settings)) as client:  # the operator's list stays: the setting only starts one
        assert client.get("/v1/workspaces/ws_default", headers=op).json()["network_allow"] == ["api.openai.com:443"]


def test_a_malformed_network_allow_entry_refuses_the_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", backend="process", network_allow="llm.local")
    with pytest.raises(EgressError, match="EVALUATOR_HOST_NETWORK_ALLOW: 'llm.local' is not host:port"):
        with TestClient(create_app(settings)):
            pass


def test_declaring_network_for_a_model_sdk_draws_no_warning(open_service: tuple[TestClient, str]) -> None:
    client, host = open_service
    code = "from openai import OpenAI\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
    saved = client.post(
        "/v1/evaluators", json={"name": "sdk", "language": "python", "code": code, "network": [host]}
    ).json()
    assert saved["capabilities"]["network"] == [{"line": 1, "detail": "from openai import OpenAI"}]
    assert not [w for w in saved["warnings"] if "network" in w], saved["warnings"]


def test_an_egress_worker_gets_only_the_proxy_variables_clients_need(open_service: tuple[TestClient, str]) -> None:
    client, host = open_service
    code = (
        "import os, ssl\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    names = sorted(n for n in os.environ if 'PROXY' in n.upper() or n.startswith('SSL_') or 'CA_' in n)\n"
        "    folder = os.environ.get('SSL_CERT_DIR', '')\n"
        "    hashed = sorted(n for n in os.listdir(folder) if n.endswith('.0')) if folder else []\n"
        "    ssl.create_default_context(capath=folder)  # a directory OpenSSL reads\n"
        "    return {'score': 1.0, 'names': names, 'hashed': len(hashed)}\n"
    )
    result = client.post("/v1/evaluate", json={"language": "python", "code": code, "network": [host]}).json()
    assert result["status"] == "ok", result
    names = result["details"]["names"]
    assert "ALL_PROXY" not in names and "all_proxy" not in names  # httpx: one TLS context less per client
    assert {"HTTP_PROXY", "HTTPS_PROXY", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"} <= set(names)
    assert "SSL_CERT_FILE" not in names  # a context given the file parses every CA when it is made
    assert result["details"]["hashed"] > 1  # the system's CAs and the proxy's own, under their hash names
