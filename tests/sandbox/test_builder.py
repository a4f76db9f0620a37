"""Package sets: built once per content hash, shared, failures cached nowhere."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.errors import BuildError
from evaluator_host.sandbox.builder import RuntimeBuilder
from tests.conftest import evaluate, make_settings


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
