"""GET /v1/runtimes/{id}/lock on every backend: the lock, requirements.txt, package-lock.json and the CycloneDX
SBOM name exactly the packages installed in the runtime (as the runtime itself lists them)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

PY_LIST = (
    "import importlib.metadata, sys\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    found = sorted(f\"{d.metadata['Name'].lower()}=={d.version}\" for d in importlib.metadata.distributions()\n"
    "                   if any('runtime' in str(p) or 'site' in str(p) for p in [d.locate_file('')]))\n"
    "    return {'score': 1.0, 'installed': found, 'python': sys.version.split()[0]}\n"
)
JS_LIST = (
    "const leven = require('leven');\n"
    "function evaluate(inputs, outputs, trace) {\n"
    "  const pkg = require('leven/package.json');\n"
    "  return {score: 1, installed: [pkg.name + '@' + pkg.version], node: process.versions.node};\n"
    "}\n"
)


@pytest.mark.slow
def test_the_lock_of_a_python_runtime_is_what_is_installed(client: TestClient) -> None:
    answer = client.post(
        "/v1/evaluate", json={"language": "python", "code": PY_LIST, "packages": {"six": "1.16.0"}, "outputs": "x"}
    )
    assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
    result = answer.json()
    runtime_id = result["runtime"]["id"]
    installed = {line for line in result["details"]["installed"] if not line.startswith(("pip==", "setuptools=="))}
    lock = client.get(f"/v1/runtimes/{runtime_id}/lock")
    assert lock.status_code == 200, lock.text
    body = lock.json()
    assert {f"{p['name'].lower()}=={p['version']}" for p in body["packages"]} >= {"six==1.16.0"}
    assert "six==1.16.0" in installed
    assert body["interpreter"]["name"] == "python" and body["runtime_id"] == runtime_id
    assert body["interpreter"]["version"] in (result["details"]["python"], "unknown")
    if client.get("/healthz").json().get("backend") == "docker":
        assert str(body["base_image"]).startswith("sha256:")
    text = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "requirements"})
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert "six==1.16.0" in text.text.splitlines()
    sbom = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"})
    assert sbom.status_code == 200 and "cyclonedx" in sbom.headers["content-type"]
    document = json.loads(sbom.text)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    purls = {c["purl"] for c in document["components"]}
    assert purls == {f"pkg:pypi/{p['name']}@{p['version']}" for p in body["packages"]}
    bad = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "zip"})
    assert bad.status_code == 422
    assert client.get("/v1/runtimes/python-0000000000000000/lock").status_code == 404


@pytest.mark.slow
def test_the_lock_of_a_node_runtime_is_what_is_installed(client: TestClient) -> None:
    answer = client.post(
        "/v1/evaluate", json={"language": "javascript", "code": JS_LIST, "packages": {"leven": "3.1.0"}}
    )
    assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
    result = answer.json()
    runtime_id = result["runtime"]["id"]
    body = client.get(f"/v1/runtimes/{runtime_id}/lock").json()
    locked = {f"{p['name']}@{p['version']}" for p in body["packages"]}
    assert set(result["details"]["installed"]) <= locked and body["interpreter"]["name"] == "node"
    npm = json.loads(client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "package-lock"}).text)
    assert npm["lockfileVersion"] == 3 and npm["packages"]["node_modules/leven"]["version"] == "3.1.0"
    sbom = json.loads(client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"}).text)
    assert {c["purl"] for c in sbom["components"]} == {f"pkg:npm/{p['name']}@{p['version']}" for p in body["packages"]}
