"""GET /v1/runtimes/{id}/lock on every backend: the lock, requirements.txt, package-lock.json and the CycloneDX
SBOM name exactly the packages installed in the runtime (as the runtime itself lists them), with the hashes of
the real archives (a wheel the test downloads itself, the npm registry's integrity); pip installs the served
requirements.txt in its hash-checking mode."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.builds import installers, lockfile
from evaluator_host.builds.models import RuntimeView
from evaluator_host.builds.npm import npm_command
from evaluator_host.definitions import languages
from evaluator_host.errors import BadRequest

# pin sets of this test's own: docker runtime images are shared machine-wide, and one of the same pins built
# before hashes were recorded would (rightly) answer without hashes
PY_PINS = {"six": "1.16.0", "tomli": "2.0.1"}
JS_PINS = {"leven": "3.1.0", "ms": "2.1.3"}
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
def test_the_lock_of_a_python_runtime_is_what_is_installed(client: TestClient, tmp_path: Path) -> None:
    answer = client.post(
        "/v1/evaluate", json={"language": "python", "code": PY_LIST, "packages": PY_PINS, "outputs": "x"}
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
    six_line = next(line for line in text.text.splitlines() if line.startswith("six==1.16.0 "))
    # the served hashes are the real archive's: the wheel pip itself downloads for this interpreter
    wheel = tmp_path / "wheel"
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheel)]
    done = subprocess.run([*download, "six==1.16.0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (archive,) = wheel.glob("six-1.16.0-*.whl")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (six,) = [p for p in body["packages"] if p["name"].lower() == "six"]
    assert six["sha256"] == digest and six["hashes"][0] == f"sha256:{digest}"
    if client.get("/healthz").json().get("backend") == "process":  # (built by this session: a docker image of
        # these pins may be older than the rule) a wheels-only build lists the files it could have been
        # installed from: six 1.16.0's one wheel, not its sdist
        assert six["hashes"] == [f"sha256:{digest}"]
    assert f"--hash=sha256:{digest}" in six_line.split()
    assert all(p["hashes"] and p["sha256"] for p in body["packages"])
    # a real use of the lock: pip's hash-checking mode installs exactly it
    served = tmp_path / "requirements.txt"
    served.write_text(text.text)
    install = [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(served)]
    done = subprocess.run([*install, "--target", str(tmp_path / "target")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "target" / "six.py").is_file()
    sbom = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"})
    assert sbom.status_code == 200 and "cyclonedx" in sbom.headers["content-type"]
    document = json.loads(sbom.text)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    purls = {c["purl"] for c in document["components"]}
    assert purls == {f"pkg:pypi/{p['name']}@{p['version']}" for p in body["packages"]}
    (component,) = [c for c in document["components"] if c["name"].lower() == "six"]
    assert component["hashes"] == [{"alg": "SHA-256", "content": digest}]
    again = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"})
    assert again.content == sbom.content  # the same lock, the same bytes (serial number, references, timestamp)
    assert document["serialNumber"].startswith("urn:uuid:")
    bad = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "zip"})
    assert bad.status_code == 422
    other = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "package-lock"})  # npm's, not pip's
    assert other.status_code == 400 and "requirements or cyclonedx" in other.json()["error"]["message"], other.text
    assert client.get("/v1/runtimes/python-0000000000000000/lock").status_code == 404


@pytest.mark.slow
def test_the_lock_of_a_node_runtime_is_what_is_installed(client: TestClient) -> None:
    answer = client.post("/v1/evaluate", json={"language": "javascript", "code": JS_LIST, "packages": JS_PINS})
    assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
    result = answer.json()
    runtime_id = result["runtime"]["id"]
    body = client.get(f"/v1/runtimes/{runtime_id}/lock").json()
    locked = {f"{p['name']}@{p['version']}" for p in body["packages"]}
    assert set(result["details"]["installed"]) <= locked and body["interpreter"]["name"] == "node"
    npm = json.loads(client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "package-lock"}).text)
    assert npm["lockfileVersion"] == 3 and npm["packages"]["node_modules/leven"]["version"] == "3.1.0"
    # the served integrity is the registry's own for that tarball
    view = [*npm_command(), "view", "leven@3.1.0", "dist.integrity"]
    registry = subprocess.run(view, capture_output=True, text=True, timeout=120)
    assert registry.returncode == 0, registry.stderr
    integrity = registry.stdout.strip()
    assert integrity.startswith("sha512-")
    (leven,) = [p for p in body["packages"] if p["name"] == "leven"]
    assert leven["hashes"] == [integrity] and leven["sha256"] is None
    assert npm["packages"]["node_modules/leven"]["integrity"] == integrity
    sbom = json.loads(client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"}).text)
    assert {c["purl"] for c in sbom["components"]} == {f"pkg:npm/{p['name']}@{p['version']}" for p in body["packages"]}
    (component,) = [c for c in sbom["components"] if c["name"] == "leven"]
    sha512 = base64.b64decode(integrity[len("sha512-") :]).hex()
    assert component["hashes"] == [{"alg": "SHA-512", "content": sha512}]
    other = client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "requirements"})  # pip would ask PyPI
    assert other.status_code == 400 and "package-lock or cyclonedx" in other.json()["error"]["message"], other.text


@pytest.mark.parametrize("language, family", [("python", "python"), ("javascript", "node")])
def test_the_runtime_of_no_packages_has_an_empty_lock(client: TestClient, language: str, family: str) -> None:
    """An evaluator without pins runs on its family's interpreter alone: nothing is built, yet its results and jobs
    name that runtime, and its lock (no packages, the interpreter, the base image) is served like any other's."""
    code = {"python": "def evaluate(inputs, outputs, trace):\n    return 1\n"}.get(
        language, "function evaluate(inputs, outputs, trace) { return 1 }\n"
    )
    answer = client.post("/v1/evaluate", json={"language": language, "code": code})
    assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
    runtime_id = answer.json()["runtime"]["id"]
    view = client.get(f"/v1/runtimes/{runtime_id}")
    assert view.status_code == 200, view.text
    assert view.json()["status"] == "ready" and view.json()["packages"] == {} and view.json()["language"] == family
    lock = client.get(f"/v1/runtimes/{runtime_id}/lock").json()
    assert lock["packages"] == [] and lock["interpreter"]["name"] == family and lock["runtime_id"] == runtime_id
    native = "requirements" if family == "python" else "package-lock"
    assert client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": native}).status_code == 200
    sbom = json.loads(client.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "cyclonedx"}).text)
    assert sbom.get("components", []) == [] and sbom["metadata"]["component"]["bom-ref"] == f"runtime:{runtime_id}"


def test_a_format_of_the_other_family_is_refused_and_the_sbom_is_a_function_of_the_lock() -> None:
    python = RuntimeView(id="python-x", status="ready", language="python", packages={}, lock=["six==1.16.0"])
    lock = lockfile.runtime_lock(python, {"name": "python", "version": "3.11"}, None)
    with pytest.raises(BadRequest, match="requirements or cyclonedx"):
        lockfile.render(lock, "package-lock")
    assert lockfile.render(lock, "requirements")[1].splitlines()[-1] == "six==1.16.0"
    first = lockfile.render(lock, "cyclonedx")[1]
    assert first == lockfile.render(lock, "cyclonedx")[1] and '"timestamp"' not in first
    other = lockfile.runtime_lock(python.model_copy(update={"lock": ["six==1.17.0"]}), lock.interpreter, None)
    assert json.loads(lockfile.sbom_json(other))["serialNumber"] != json.loads(first)["serialNumber"]


def test_a_runtime_built_before_hashes_were_recorded_has_none() -> None:
    view = RuntimeView(
        id="python-0123456789abcdef",
        status="ready",
        language="python",
        packages={"six": "1.16.0"},
        lock=["six==1.16.0", "rapidfuzz==3.9.7"],
        hashes={"six==1.16.0": ["sha256:" + "a" * 64]},
    )
    lock = lockfile.runtime_lock(view, {"name": "python", "version": "3.11"}, None)
    (six,) = [p for p in lock.packages if p.name == "six"]
    (rapidfuzz,) = [p for p in lock.packages if p.name == "rapidfuzz"]
    assert six.sha256 == "a" * 64 and rapidfuzz.sha256 is None and rapidfuzz.hashes == []
    # pip's hash mode is all or nothing: one package without a hash, no --hash lines at all
    assert "--hash" not in lockfile.requirements_txt(lock) and "rapidfuzz==3.9.7" in lockfile.requirements_txt(lock)
    sbom = json.loads(lockfile.sbom_json(lock))
    assert [c.get("hashes", []) for c in sbom["components"] if c["name"] == "rapidfuzz"] == [[]]


def test_the_recorded_hashes_are_read_from_the_install_output_and_nothing_else() -> None:
    python, node = languages.get("python").family, languages.get("javascript").family
    digest = "sha256:" + "b" * 64
    output = f"Installed 1 package\n{installers.HASH_MARK}{json.dumps({'six==1.16.0': [digest]})}\n"
    output += f"{installers.LOCK_MARK}\nsix==1.16.0\n"
    assert installers.lock_hashes(python, output) == {"six==1.16.0": [digest]}
    assert installers.for_family(python).lock(output.split(installers.LOCK_MARK, 1)[1]) == ["six==1.16.0"]
    # pip's fallback script records none; a garbled line is no hashes, not a failed build
    assert installers.lock_hashes(python, f"{installers.LOCK_MARK}\nsix==1.16.0\n") == {}
    assert installers.lock_hashes(python, f"{installers.HASH_MARK}{{nope\n{installers.LOCK_MARK}\n") == {}
    assert installers.lock_hashes(python, f"{installers.HASH_MARK}[1]\n{installers.LOCK_MARK}\n") == {}
    package_lock = {"packages": {"": {}, "node_modules/leven": {"version": "3.1.0", "integrity": "sha512-abc="}}}
    assert installers.lock_hashes(node, f"{installers.LOCK_MARK}\n{json.dumps(package_lock)}") == {
        "leven@3.1.0": ["sha512-abc="]
    }
