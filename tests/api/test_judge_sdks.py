"""The judge path as a new user walks it (issue 48, "Done when"): the real service (``evaluator-host serve``, a
subprocess) on an open service — no admin key, no certificates, no secret for a URL — runs LLM judges written
with the ``openai`` SDK and Braintrust's ``autoevals`` (Python, real pip installs of pinned versions) and npm
``openai`` (TypeScript, a real npm install) against a loopback OpenAI-compatible server.

What the user sets: ``EVALUATOR_HOST_NETWORK_ALLOW`` (the host), the key as a workspace secret
(``PUT /v1/secrets/OPENAI_API_KEY``), ``settings.env`` ``OPENAI_BASE_URL``; the SDKs read both from their
environment. The model API is :mod:`tests.support.llm_server`, named ``llm.local`` for the egress proxy only
(``EVALUATOR_HOST_EGRESS_HOSTS``), as the other egress tests reach theirs; it answers ``autoevals``'
classifiers with a ``tool_calls`` message (function calling), as the OpenAI API does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evaluator_host.sandbox.process.isolation import probe
from tests.support.backends import BACKENDS
from tests.support.llm_server import LLMServer, llm_server
from tests.support.service import serving

pytestmark = pytest.mark.slow  # each backend builds three runtimes from the public registries

KEY = "sk-judge-sdk-0123456789abcdef"
OPENAI_PY, AUTOEVALS_PY, OPENAI_NPM = "3.57.0", "0.4.1", "6.30.1"

OPENAI_JUDGE = """import openai

def evaluate(inputs, outputs, trace):
    client = openai.OpenAI()  # OPENAI_BASE_URL (settings.env) and OPENAI_API_KEY (the secret) from the environment
    answer = client.chat.completions.create(model="gpt-judge", messages=[{"role": "user", "content": outputs}])
    said = answer.choices[0].message.content
    return {"score": 1.0 if said == "A: " + outputs else 0.0, "reason": said}
"""
AUTOEVALS_JUDGE = """from autoevals.llm import LLMClassifier

polite = LLMClassifier(
    name="Polite",
    prompt_template="Is this answer polite? {{output}}",
    choice_scores={"Y": 1.0, "N": 0.0},
    model="gpt-4o-mini",
)

def evaluate(inputs, outputs, trace):
    score = polite(outputs, None)  # autoevals builds its client from OPENAI_BASE_URL and OPENAI_API_KEY
    return {"score": score.score, "reason": score.metadata["rationale"], "choice": score.metadata["choice"]}
"""
OPENAI_TS = """import OpenAI from 'openai'

export async function evaluate(inputs: unknown, outputs: string, trace: unknown) {
  const client = new OpenAI()  // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
  const messages = [{role: 'user' as const, content: outputs}]
  const answer = await client.chat.completions.create({model: 'gpt-judge', messages})
  const said = answer.choices[0].message.content ?? ''
  return {score: said === 'A: ' + outputs ? 1 : 0, reason: said}
}
"""


@pytest.fixture(scope="module")
def model_api() -> Iterator[LLMServer]:
    with llm_server() as server:
        server.choose = lambda prompt, choices: "Y" if "please" in prompt.lower() else "N"
        yield server


@pytest.fixture(scope="module", params=BACKENDS)
def open_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model_api: LLMServer
) -> Iterator[tuple[httpx.Client, str]]:
    if request.param == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here: no egress to test")
    host = f"llm.local:{model_api.port}"
    env = {
        "EVALUATOR_HOST_NETWORK_ALLOW": host,
        "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.local": "127.0.0.1"}),
    }
    assert "EVALUATOR_HOST_ADMIN_KEY" not in os.environ  # an open service
    data = tmp_path_factory.mktemp(f"judge-sdks-{request.param}") / "data"
    with serving(data, backend=request.param, env=env) as (client, _proc):
        client.timeout = httpx.Timeout(900)  # the first call of each test builds its runtime
        # the key as a secret of the default workspace, without any key of the service's own
        assert client.put("/v1/secrets/OPENAI_API_KEY", json={"value": KEY}).status_code == 204
        yield client, host


def _judge(client: httpx.Client, host: str, language: str, code: str, packages: dict[str, str]) -> dict[str, Any]:
    created = client.post(
        "/v1/evaluators",
        json={
            "name": f"judge-{language}-{'-'.join(packages)}",
            "language": language,
            "code": code,
            "packages": packages,
            "secrets": ["OPENAI_API_KEY"],
            "network": [host],
            "settings": {"env": {"OPENAI_BASE_URL": f"http://{host}/v1"}, "timeout_s": 120},
        },
    )
    assert created.status_code == 201, created.text
    evaluator: dict[str, Any] = created.json()
    assert not [w for w in evaluator["warnings"] if "network" in w], evaluator["warnings"]
    return evaluator


def _score(client: httpx.Client, evaluator: dict[str, Any], outputs: str) -> dict[str, Any]:
    answer = client.post(f"/v1/evaluators/{evaluator['id']}/evaluate", json={"outputs": outputs})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    assert result["status"] == "ok", json.dumps(result.get("error"))
    assert KEY not in json.dumps(result)
    return result


def _sent_key(model_api: LLMServer, marker: str) -> list[str]:
    """The ``Authorization`` headers (any case) of the calls whose body carries ``marker``."""
    sent = zip(model_api.headers, model_api.bodies, strict=True)
    return [{k.lower(): v for k, v in h.items()}.get("authorization", "") for h, b in sent if marker in json.dumps(b)]


def test_the_openai_sdk_judges_on_an_open_service(open_service: tuple[httpx.Client, str], model_api: LLMServer) -> None:
    client, host = open_service
    evaluator = _judge(client, host, "python", OPENAI_JUDGE, {"openai": OPENAI_PY})
    result = _score(client, evaluator, "python sdk answer")
    assert result["score"] == 1.0 and result["reason"] == "A: python sdk answer", result
    assert _sent_key(model_api, "python sdk answer")[-1] == f"Bearer {KEY}"


def test_an_autoevals_classifier_judges_on_an_open_service(
    open_service: tuple[httpx.Client, str], model_api: LLMServer
) -> None:
    client, host = open_service
    evaluator = _judge(client, host, "python", AUTOEVALS_JUDGE, {"autoevals": AUTOEVALS_PY, "openai": OPENAI_PY})
    polite = _score(client, evaluator, "Please find the answer attached")
    assert polite["score"] == 1.0 and polite["details"]["choice"] == "Y", polite
    assert "judged: " in polite["reason"]  # the model's reasons, through autoevals' tool call
    curt = _score(client, evaluator, "Figure it out yourself")
    assert curt["score"] == 0.0 and curt["details"]["choice"] == "N", curt
    assert _sent_key(model_api, "Figure it out yourself")[-1] == f"Bearer {KEY}"
    sent = [b for b in model_api.bodies if "Figure it out yourself" in json.dumps(b)][-1]
    assert sent["tools"][0]["function"]["name"] == "select_choice"  # function calling, as autoevals asks


def test_npm_openai_judges_in_typescript_on_an_open_service(
    open_service: tuple[httpx.Client, str], model_api: LLMServer
) -> None:
    client, host = open_service
    evaluator = _judge(client, host, "typescript", OPENAI_TS, {"openai": OPENAI_NPM})
    result = _score(client, evaluator, "typescript sdk answer")
    assert result["score"] == 1.0 and result["reason"] == "A: typescript sdk answer", result
    assert _sent_key(model_api, "typescript sdk answer")[-1] == f"Bearer {KEY}"


def test_the_judge_path_needs_no_key_of_the_service(open_service: tuple[httpx.Client, str]) -> None:
    client, _host = open_service
    # what the tests above used, without any Authorization header: an open service's default workspace
    assert "Authorization" not in client.headers
    assert [s["name"] for s in client.get("/v1/secrets").json()["data"]] == ["OPENAI_API_KEY"]
