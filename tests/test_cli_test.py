"""``evaluator-host test PATH|ID``: an evaluator's fixtures for CI — exit 0 all pass, 1 a fixture failed,
2 a usage error; ``--junit FILE`` parsed as JUnit XML. A file runs in the command's process; a stored id
on a real service. Both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from tests.support import REPO, zygote
from tests.support.backends import BACKENDS
from tests.support.service import serving

CODE = (
    "THRESHOLD = {t}\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    x = float(outputs)\n"
    "    return {{'score': x, 'passed': x >= THRESHOLD, 'label': 'high' if x >= THRESHOLD else 'low'}}\n"
)
FIXTURES: list[dict[str, Any]] = [
    {"name": "high", "outputs": 0.9, "expect": {"passed": True, "label": "high", "score": 0.9}},
    {"name": "middle", "outputs": 0.6, "expect": {"passed": True}},
    {"name": "low", "outputs": 0.1, "expect": {"passed": False}},
]


def cli(*argv: str, backend: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_BACKEND": backend}
    command = [sys.executable, "-m", "evaluator_host.cli", "test", *argv]
    return zygote.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _junit(path: Path) -> dict[str, list[str] | None]:
    """testcase name -> its failure's lines (None: passed), from the JUnit XML at ``path``."""
    suite = ElementTree.parse(path).getroot().find("testsuite")
    assert suite is not None
    cases = {}
    for case in suite.findall("testcase"):
        failure = case.find("failure")
        cases[case.get("name", "")] = None if failure is None else (failure.text or "").splitlines()
    assert int(suite.get("tests", "-1")) == len(cases)
    assert int(suite.get("failures", "-1")) == sum(v is not None for v in cases.values())
    return cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_and_its_sidecar_pass_fail_and_write_junit(tmp_path: Path, backend: str) -> None:
    (tmp_path / "gate.py").write_text(CODE.format(t=0.5))
    (tmp_path / "gate.fixtures.json").write_text(json.dumps(FIXTURES))
    passed = cli(str(tmp_path / "gate.py"), "--junit", str(tmp_path / "ok.xml"), backend=backend)
    assert passed.returncode == 0, passed.stderr
    assert "gate.py: 3 of 3 fixtures passed" in passed.stdout
    assert _junit(tmp_path / "ok.xml") == {"high": None, "middle": None, "low": None}
    (tmp_path / "gate.py").write_text(CODE.format(t=0.7))  # 'middle' now fails
    failed = cli(str(tmp_path / "gate.py"), "--junit", str(tmp_path / "ko.xml"), "--json", backend=backend)
    assert failed.returncode == 1, failed.stderr
    assert json.loads(failed.stdout)["failed"] == 1
    assert _junit(tmp_path / "ko.xml") == {"high": None, "middle": ["passed false, expected true"], "low": None}


def test_usage_errors_exit_2_and_say_what_is_wrong(tmp_path: Path) -> None:
    code = tmp_path / "gate.py"
    code.write_text(CODE.format(t=0.5))
    missing = cli(str(code), backend="process")
    assert missing.returncode == 2 and "gate.fixtures.json" in missing.stderr and "--fixtures" in missing.stderr
    (tmp_path / "typo.json").write_text(json.dumps([{"name": "a", "outptus": 1, "expect": {"pased": True}}]))
    typo = cli(str(code), "--fixtures", str(tmp_path / "typo.json"), backend="process")
    assert typo.returncode == 2
    assert "did you mean 'outputs'?" in typo.stderr and "did you mean 'passed'?" in typo.stderr
    (tmp_path / "empty.json").write_text("[]")
    assert cli(str(code), "--fixtures", str(tmp_path / "empty.json"), backend="process").returncode == 2
    (tmp_path / "broken.json").write_text("[{")
    broken = cli(str(code), "--fixtures", str(tmp_path / "broken.json"), backend="process")
    assert broken.returncode == 2 and "not valid JSON" in broken.stderr
    nowhere = cli(str(tmp_path / "nope.py"), backend="process")
    assert nowhere.returncode == 2 and "no such file, and not an evaluator id" in nowhere.stderr
    (tmp_path / "bad.py").write_text("def evaluate(inputs, outputs, trace)\n    return 1\n")
    (tmp_path / "bad.fixtures.json").write_text(json.dumps(FIXTURES))
    syntax = cli(str(tmp_path / "bad.py"), backend="process")
    assert syntax.returncode == 2 and "bad.py:1:" in syntax.stderr and "SyntaxError" in syntax.stderr
    assert cli(str(code), "--revision", "2", backend="process").returncode == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stored_evaluator_by_id_on_a_service(tmp_path: Path, backend: str) -> None:
    with serving(tmp_path / "data", backend=backend) as (http, _proc):
        server = str(http.base_url)
        body = {"name": "gate", "language": "python", "code": CODE.format(t=0.5), "fixtures": FIXTURES}
        ev = http.post("/v1/evaluators", json=body)
        assert ev.status_code == 201, ev.text
        ev_id = ev.json()["id"]
        passed = cli(ev_id, "--server", server, "--junit", str(tmp_path / "ok.xml"), backend=backend)
        assert passed.returncode == 0, passed.stderr
        assert _junit(tmp_path / "ok.xml") == {"high": None, "middle": None, "low": None}
        draft = http.put(f"/v1/evaluators/{ev_id}", json=body | {"code": CODE.format(t=0.7)})
        assert draft.status_code == 409 and draft.json()["error"]["evaluator"]["revision"] == 2
        latest = cli(ev_id, "--server", server, backend=backend)  # the latest is still revision 1
        assert latest.returncode == 0 and f"{ev_id}@1: 3 of 3 fixtures passed" in latest.stdout, latest.stdout
        failed = cli(ev_id, "--server", server, "--revision", "2", "--junit", str(tmp_path / "ko.xml"), backend=backend)
        assert failed.returncode == 1 and f"{ev_id}@2 (draft)" in failed.stdout, failed.stdout
        assert _junit(tmp_path / "ko.xml")["middle"] == ["passed false, expected true"]
        unknown = cli("ev_doesnotexist", "--server", server, backend=backend)
        assert unknown.returncode == 2 and "404" in unknown.stderr
        plain = http.post("/v1/evaluators", json={k: v for k, v in body.items() if k != "fixtures"}).json()
        nothing = cli(plain["id"], "--server", server, backend=backend)
        assert nothing.returncode == 2 and "has no fixtures" in nothing.stderr
