"""The same NeMo metrics with the real ``nemo_evaluator_sdk`` (``nemo-platform`` pinned, really
pip-installed into a runtime) and with the built-in one: every answer the same (docs/metrics.md).

``nemo-platform`` 0.3.0 is the newest release whose ``Requires-Python`` admits this runtime's CPython
3.11 (0.4.0 and later need 3.12): a pin of 0.6.0 is a 422 ``BuildError`` carrying pip's reason and the
version that would install. The real package's base requirements are large (a build of minutes on a
loaded machine), hence ``slow`` and a build limit of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.definitions.languages import RUNTIMES_DIR
from tests.support.nemo import TUTORIAL_METRIC, cases
from tests.support.service import make_settings

pytestmark = [pytest.mark.slow, pytest.mark.network]

# its nemo_evaluator_sdk imports pyarrow, jsonpath_ng and sacrebleu, which only its extras require (NeMo's
# tutorial installs "nemo-platform[all]"): pinned beside it
REAL = {"nemo-platform": "0.3.0", "pyarrow": "26.0.1", "jsonpath-ng": "1.16.0", "sacrebleu": "2.6.0"}

# which package built the MetricInput, and the checks of output_spec(): the same metric both ways
PROBE = """from nemo_evaluator_sdk import Metric, MetricOutput, MetricOutputSpec, MetricResult


class Probe(Metric):
    type = "probe"

    def output_spec(self):  # no required=False: nemo-platform 0.3.0's constructors do not take it
        return [MetricOutputSpec.boolean("ok"), MetricOutputSpec.continuous_score("sim"),
                MetricOutputSpec.label("made_by")]

    async def compute_scores(self, metric_input):
        how = metric_input.row.data["how"]
        made_by = MetricOutput(name="made_by", value=type(metric_input).__module__)
        sim = MetricOutput(name="sim", value="0.25")
        if how == "kind":
            return MetricResult(outputs=[MetricOutput(name="ok", value="maybe"), sim, made_by])
        if how == "missing":
            return MetricResult(outputs=[sim, made_by])
        if how == "undeclared":
            return MetricResult(outputs=[MetricOutput(name="ok", value=True), sim, made_by,
                                         MetricOutput(name="extra", value=1)])
        return MetricResult(outputs=[MetricOutput(name="ok", value="yes"), sim, made_by])
"""
HOWS = ["kind", "missing", "undeclared", "coerced"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("nemo-real")
    with TestClient(create_app(make_settings(data, backend="process", build_timeout_s=1800))) as test_client:
        yield test_client


def _run(client: TestClient, code: str, cases_: list[dict[str, Any]], packages: dict[str, str]) -> list[dict[str, Any]]:
    body = {
        "language": "python",
        "code": code,
        "cases": cases_,
        "packages": packages,
        "settings": {"memory_mb": 1024, "timeout_s": 60},
    }
    response = client.post("/v1/evaluate", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]  # type: ignore[no-any-return]


def _answer(result: dict[str, Any]) -> tuple[Any, ...]:
    error = result["error"] or {}
    return result["status"], result["outputs"], error.get("type"), error.get("message")


def test_the_real_package_gives_the_same_answers_as_the_built_in_one(client: TestClient) -> None:
    real = _run(client, TUTORIAL_METRIC, cases(), REAL)
    builtin = _run(client, TUTORIAL_METRIC, cases(), {})
    assert [r["status"] for r in real] == ["ok"] * 4, real[0]
    assert [_answer(r) for r in real] == [_answer(r) for r in builtin]
    assert real[0]["runtime"]["packages"] == REAL
    probe_cases = [{"inputs": {"how": how}} for how in HOWS]
    real = _run(client, PROBE, probe_cases, REAL)
    builtin = _run(client, PROBE, probe_cases, {})
    assert [_answer(r) for r in real] == [_answer(r) for r in builtin]
    assert [r["status"] for r in real] == ["invalid_result"] * 3 + ["ok"]
    assert real[-1]["label"] == "nemo_evaluator_sdk.values.protocol"  # the real package's pydantic MetricInput
    assert builtin[-1]["label"] == "nemo_evaluator_sdk"  # the built-in one


def test_a_pin_this_python_cannot_install_names_the_reason(client: TestClient) -> None:
    body = {"language": "python", "code": TUTORIAL_METRIC, "outputs": "1", "packages": {"nemo-platform": "0.6.0"}}
    refused = client.post("/v1/evaluate", json=body)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["type"] == "BuildError" and "Requires-Python" in error["message"]
    assert "nemo-platform==0.3.0" in error["message"]


def _harness(code: Path, entrypoint: str, site_dirs: list[str], cases_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Python harness run as the sandbox runs it (``-I -S``, the runtime's folders as ``site_dirs``)."""
    config = {"code_path": str(code), "entrypoint": entrypoint, "interface": "metric", "work_dir": str(code.parent)}
    config["site_dirs"] = site_dirs  # type: ignore[assignment]
    run = json.dumps({"op": "run", "id": "x", "cases": cases_}).encode()
    harness = RUNTIMES_DIR / "python" / "harness.py"
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(harness), json.dumps(config)],
        input=len(run).to_bytes(4, "big") + run,
        capture_output=True,
        timeout=120,
    ).stdout
    frames = []
    while out:
        size = int.from_bytes(out[:4], "big")
        frames.append(json.loads(out[4 : 4 + size]))
        out = out[4 + size :]
    return [f for f in frames if f["type"] == "result"]


def test_the_06_package_named_by_the_tutorial_is_read_the_same_way(tmp_path: Path) -> None:
    """``nemo-platform==0.6.0`` (the tutorial's; Python >= 3.12 only, so no runtime here installs it): its
    wheel's ``nemo_evaluator_sdk`` with pydantic from this Python's site-packages, through the harness."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
        + ["-d", str(wheels), "nemo-platform==0.6.0"],
        check=True,
        timeout=600,
    )
    real = tmp_path / "real"
    with zipfile.ZipFile(next(wheels.glob("*.whl"))) as wheel:
        wheel.extractall(real, [n for n in wheel.namelist() if n.startswith("nemo_evaluator_sdk/")])
    deps = sysconfig.get_paths()["purelib"]  # pydantic and OpenTelemetry's protobufs, as the real package needs
    code = tmp_path / "evaluator.py"
    for source, entrypoint, cases_ in [
        (TUTORIAL_METRIC, "ArithmeticExpressionCorrectnessMetric", cases()),
        (PROBE, "Probe", [{"inputs": {"how": how}} for how in HOWS]),
    ]:
        code.write_text(source)
        with_real = _harness(code, entrypoint, [str(real), deps], cases_)
        built_in = _harness(code, entrypoint, [], cases_)
        assert [r["status"] for r in with_real] == [r["status"] for r in built_in], with_real
        label = ("made_by", "nemo_evaluator_sdk.values.protocol", "nemo_evaluator_sdk")
        for a, b in zip(with_real, built_in, strict=True):
            assert (a.get("error") or {}).get("message") == (b.get("error") or {}).get("message")
            if a["status"] == "ok":
                theirs = {k: (label[2] if v == label[1] else v) for k, v in a["value"].items()}
                assert theirs == b["value"]
    assert with_real[-1]["value"]["made_by"] == "nemo_evaluator_sdk.values.protocol"
