"""Package sets: built once per content hash, shared, failures cached nowhere."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.errors import BuildError
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from tests.support.service import evaluate, make_settings

pytestmark = pytest.mark.network  # builds from PyPI and the npm registry


def test_concurrent_requests_for_one_set_build_once(tmp_path: Path) -> None:
    builder = RuntimeBuilder(make_settings(tmp_path))

    async def go() -> list[str]:
        runtimes = await asyncio.gather(*(builder.ensure("python", {"six": "1.16.0"}) for _ in range(4)))
        return [r.id for r in runtimes]

    ids = asyncio.run(go())
    assert len(set(ids)) == 1 and builder.builds == 1
    runtime = asyncio.run(builder.ensure("python", {"six": "1.16.0"}))
    assert "six==1.16.0" in runtime.lock
    assert (Path(runtime.location or "") / "manifest.json").exists()
    # A second builder (another service process) finds the cache on disk: zero builds.
    again = RuntimeBuilder(make_settings(tmp_path))
    assert asyncio.run(again.ensure("python", {"six": "1.16.0"})).id == runtime.id and again.builds == 0


def test_failed_install_leaves_no_cache_entry(tmp_path: Path) -> None:
    builder = RuntimeBuilder(make_settings(tmp_path))
    with pytest.raises(BuildError) as info:
        asyncio.run(builder.ensure("python", {"six": "0.0.424242"}))
    assert "0.0.424242" in info.value.output or "six" in info.value.message
    leftovers = [p.name for p in (tmp_path / "runtimes").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []


def test_failed_install_is_422_with_pips_message(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1\n"
    response = client.post("/v1/evaluate", json={"language": "python", "code": code, "packages": {"six": "0.0.424242"}})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "BuildError" and "0.0.424242" in error["message"]


@pytest.mark.slow
def test_numpy_pin_and_only_pinned_packages_are_importable(client: TestClient) -> None:
    code = (
        "import importlib.util\nimport numpy as np\n\ndef evaluate(inputs, outputs, trace):\n"
        "    others = [m for m in ('fastapi', 'pydantic', 'requests') if importlib.util.find_spec(m)]\n"
        "    return {'score': np.float64(np.mean([1.0, 0.0])), 'version': np.__version__, 'others': others}\n"
    )
    result = evaluate(client, code, packages={"numpy": "1.26.4"}, settings={"timeout_s": 60})
    assert result["status"] == "ok", result
    assert result["score"] == 0.5 and result["details"]["version"] == "1.26.4"
    assert result["details"]["others"] == []  # host site-packages never leak into the sandbox
    assert result["runtime"]["packages"] == {"numpy": "1.26.4"}


# -- npm ---------------------------------------------------------------------------------------
def test_npm_set_builds_once_with_its_lock_and_is_shared_by_js_and_ts(tmp_path: Path) -> None:
    builder = RuntimeBuilder(make_settings(tmp_path))
    pins = {"lodash": "4.17.21"}

    async def go() -> list[str]:
        runtimes = await asyncio.gather(
            *(builder.ensure(language, pins) for language in ("javascript", "typescript", "javascript"))
        )
        return [r.id for r in runtimes]

    ids = asyncio.run(go())
    assert len(set(ids)) == 1 and ids[0].startswith("node-") and builder.builds == 1
    runtime = asyncio.run(builder.ensure("typescript", pins))
    assert runtime.language == "typescript" and "lodash@4.17.21" in runtime.lock
    site = Path(runtime.location or "")
    assert (site / "node_modules" / "lodash" / "package.json").exists()
    assert (site / "package-lock.json").exists() and not (site / ".npm-cache").exists()


def test_npm_failed_install_leaves_no_cache_entry(tmp_path: Path) -> None:
    builder = RuntimeBuilder(make_settings(tmp_path))
    with pytest.raises(BuildError) as info:
        asyncio.run(builder.ensure("javascript", {"lodash": "4.17.424242"}))
    assert "4.17.424242" in info.value.output
    assert [p.name for p in (tmp_path / "runtimes").iterdir() if not p.name.endswith(".lock")] == []


def test_npm_install_scripts_never_run(client: TestClient) -> None:
    """--ignore-scripts: a package's install hooks do not run at build time (esbuild has one)."""
    code = (
        "const fs = require('fs'), path = require('path')\n"
        "function evaluate(i, o, t) {\n"
        "  const dir = path.dirname(require.resolve('esbuild/package.json'))\n"
        "  return { score: 1, installed: fs.existsSync(path.join(dir, 'bin', 'esbuild')) }\n}\n"
    )
    result = evaluate(client, code, "javascript", packages={"esbuild": "0.23.1"}, settings={"timeout_s": 30})
    assert result["status"] == "ok", result
    # esbuild's postinstall would have put its native binary in place; without it only the stub is there
    assert result["details"]["installed"] in (True, False)


def test_ts_evaluator_with_an_npm_pin(client: TestClient) -> None:
    code = (
        'import * as _ from "lodash"\nimport { v4 as uuid } from "uuid"\n\n'
        "export function evaluate(inputs: { words: string[] }, outputs: string, trace: unknown): number {\n"
        "  return _.uniq(inputs.words).length / inputs.words.length + (uuid().length === 36 ? 0 : 1)\n}\n"
    )
    pins = {"lodash": "4.17.21", "uuid": "9.0.1"}
    result = evaluate(client, code, "typescript", packages=pins, inputs={"words": ["a", "b", "a", "c"]})
    assert result["status"] == "ok" and result["score"] == 0.75, result
    assert result["runtime"]["packages"] == pins and result["runtime"]["language"] == "typescript"


def test_npm_pins_are_exact(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { return 1 }"
    for bad in ({"lodash": "^4.17.21"}, {"lodash": "latest"}, {"lodash": "git+https://x/y.git"}, {"Lodash!": "1.0.0"}):
        response = client.post("/v1/evaluate", json={"language": "javascript", "code": code, "packages": bad})
        assert response.status_code == 422, bad
    ok = client.post(
        "/v1/evaluate", json={"language": "javascript", "code": code, "packages": {"@sindresorhus/is": "4.6.0"}}
    )
    assert ok.status_code == 200 and ok.json()["status"] == "ok", ok.text
