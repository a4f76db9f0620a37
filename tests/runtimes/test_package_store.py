"""Package sets install with uv, store every package once, and say where a build stands (issue 33, point 1).

Real builds from the configured indexes (PyPI through the machine's settings) on the process
backend's build sandbox; the store is uv's cache beside the runtimes (``builds/store.py``).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.builds import uv
from evaluator_host.builds.store import disk_usage
from evaluator_host.sandbox.process.bytecode import TODO
from tests.support.service import assert_healthy, evaluate, make_settings
from tests.support.wait import wait_until

pytestmark = pytest.mark.network

CODE = "def evaluate(inputs, outputs, trace):\n    import {module}\n    return 1.0\n"


def _files(root: Path) -> dict[str, os.stat_result]:
    return {str(p.relative_to(root)): p.lstat() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_two_sets_differing_in_one_package_share_the_others_files(tmp_path: Path) -> None:
    """rapidfuzz + six, then rapidfuzz + idna: the second runtime's rapidfuzz is the first's (the same inodes,
    bytecode included), so both together take about one set plus idna; every file of it, and of the store
    entries it links, is root's and writable by no one else (a later build's uid writes none of them)."""
    settings = make_settings(tmp_path, backend="process")
    with TestClient(create_app(settings)) as client:
        first = evaluate(client, CODE.format(module="rapidfuzz"), packages={"rapidfuzz": "3.9.7", "six": "1.16.0"})
        second = evaluate(client, CODE.format(module="idna"), packages={"rapidfuzz": "3.9.7", "idna": "3.10"})
        assert first["score"] == second["score"] == 1.0, (first, second)
        one = client.get(f"/v1/runtimes/{first['runtime']['id']}").json()
        two = client.get(f"/v1/runtimes/{second['runtime']['id']}").json()
        assert one["lock"] == ["rapidfuzz==3.9.7", "six==1.16.0"]
        assert two["lock"] == ["idna==3.10", "rapidfuzz==3.9.7"]
        assert "Installed 2 packages" in two["log_tail"]  # uv's words, not pip's
        assert uv.PROGRESS_MARK not in two["log_tail"]
        a, b = (tmp_path / "runtimes" / one["id"] / "site", tmp_path / "runtimes" / two["id"] / "site")
        # the bytecode is compiled once per store entry and linked into both runtimes
        pyc = "rapidfuzz/__pycache__/__init__.cpython-311.pyc"
        # each runtime's links are made one file at a time, after its first result: wait until its work-left-over
        # file is gone too (written before the build answered, removed once every link is made)
        wait_until(lambda: all((p / pyc).exists() and not (p.parent / TODO).exists() for p in (a, b)), timeout=120)
        files_a, files_b = _files(a), _files(b)
        shared = [name for name in files_a if name.startswith("rapidfuzz/")]
        assert len(shared) > 50 and any(name.endswith(".pyc") for name in shared)
        for name in shared:
            assert files_a[name].st_ino == files_b[name].st_ino, name
            assert files_a[name].st_uid == 0 and not files_a[name].st_mode & (stat.S_IWGRP | stat.S_IWOTH), name
        assert files_a["six.py"].st_ino not in {info.st_ino for info in files_b.values()}
        both, alone = disk_usage([a, b]), disk_usage([a])
        idna = disk_usage([b / "idna"]) + disk_usage(list(b.glob("idna-*.dist-info")))
        rapidfuzz_meta = disk_usage(list(b.glob("rapidfuzz-*.dist-info")))
        assert both - alone <= idna + rapidfuzz_meta + 64 * 1024, (both, alone, idna)
        # the store entries the runtimes use are root's: no build uid can change what is linked
        entries = [e for e in (tmp_path / "package-store" / "archive-v0").iterdir()]
        assert entries and all(e.stat().st_uid == 0 and not e.stat().st_mode & stat.S_IWOTH for e in entries)
        assert_healthy(client)


@pytest.mark.slow
def test_a_set_with_no_wheel_builds_from_source_without_the_store(tmp_path: Path) -> None:
    """uv installs into the store only with ``--no-build`` (no package code runs); a pin published only
    as source installs again with source builds and a private cache, and says so in its log."""
    settings = make_settings(tmp_path, backend="process")
    with TestClient(create_app(settings)) as client:
        result = evaluate(client, CODE.format(module="rouge_score"), packages={"rouge-score": "0.1.2"})
        assert result["score"] == 1.0, result
        view = client.get(f"/v1/runtimes/{result['runtime']['id']}").json()
        assert any(line.replace("_", "-") == "rouge-score==0.1.2" for line in view["lock"]), view["lock"]
        log = (tmp_path / "runtimes" / view["id"] / "build.log").read_text()
        assert log.startswith(uv.NEEDS_SOURCES)
        site = tmp_path / "runtimes" / view["id"] / "site"
        assert all(info.st_nlink == 1 for info in _files(site).values())  # copied: shares nothing
        assert_healthy(client)


@pytest.mark.slow
def test_progress_is_reported_while_a_set_builds(tmp_path: Path) -> None:
    """POST a set (numpy + scipy: ~55 MB to fetch) and follow it: the runtime resource reports its
    phases in order (resolving, downloading n/N, installing) and says them in X-Runtime-Build; once
    ready, no progress is left."""
    settings = make_settings(tmp_path, backend="process")
    with TestClient(create_app(settings)) as client:
        started = client.post(
            "/v1/runtimes", json={"language": "python", "packages": {"numpy": "2.1.3", "scipy": "1.14.1"}}
        )
        assert started.status_code == 202, started.text
        location = started.headers["location"]
        seen: list[tuple[str, int, int]] = []
        notes: list[str] = []
        deadline = time.monotonic() + 300  # bounded: the build's own time limit
        while time.monotonic() < deadline:
            answer = client.get(location)
            view = answer.json()
            if view["status"] != "building":
                break
            assert view["progress"] is not None, view
            step = (view["progress"]["phase"], view["progress"]["done"], view["progress"]["total"])
            if not seen or seen[-1] != step:
                seen.append(step)
                notes.append(answer.headers["x-runtime-build"])
            time.sleep(0.02)
        assert view["status"] == "ready" and view["progress"] is None, view
        phases = [phase for phase, _, _ in seen]
        order = ["waiting", "resolving", "downloading", "installing", "finishing"]
        assert phases == sorted(phases, key=order.index), seen  # never backwards
        assert {"resolving", "downloading"} & set(phases) or {"installing"} & set(phases), seen
        downloads = [(done, total) for phase, done, total in seen if phase == "downloading"]
        assert all(0 <= done <= total for done, total in downloads), downloads
        assert all(note.startswith(f"building; runtime={view['id']}; ") for note in notes), notes
        assert any("phase=" in note for note in notes), notes
        assert_healthy(client)


def test_a_first_evaluation_that_built_names_its_phases(tmp_path: Path) -> None:
    """The request that had to build says how long each phase took, after the build's duration."""
    settings = make_settings(tmp_path, backend="process")
    with TestClient(create_app(settings)) as client:
        body = {"language": "python", "code": CODE.format(module="six"), "packages": {"six": "1.16.0"}}
        answer = client.post("/v1/evaluate", json=body)
        assert answer.status_code == 200, answer.text
        note = answer.headers["x-runtime-build"]
        assert note.startswith(f"built; runtime={answer.json()['runtime']['id']}; duration="), note
        assert "; resolving=" in note and "; downloading=1 in " in note, note


def test_progress_reports_are_read_from_a_log() -> None:
    """What the API shows comes from the installer's reports, the last one winning; the summary of the
    phases is what X-Runtime-Build says."""
    mark = uv.PROGRESS_MARK
    log = "\n".join(
        [
            mark + '{"phase": "resolving", "done": 0, "total": 0, "t": 0.0}',
            "Resolved 3 packages in 0.2s",
            mark + '{"phase": "downloading", "done": 0, "total": 2, "t": 0.4}',
            mark + '{"phase": "downloading", "done": 1, "total": 2, "t": 0.9}',
            mark + '{"phase": "installing", "done": 2, "total": 2, "t": 1.5}',
            mark + "not json",
            mark + '{"phase": "finishing", "done": 2, "total": 2, "t": 1.75}',
        ]
    )
    assert uv.progress(log[: log.index("installing") - 40]) == {"phase": "downloading", "done": 1, "total": 2}
    assert uv.progress(log) == {"phase": "finishing", "done": 2, "total": 2}
    assert uv.progress("no reports") is None
    assert uv.summary(log) == "resolving=0.4s; downloading=2 in 1.1s; installing=0.2s"
    assert uv.without_progress(log) == "Resolved 3 packages in 0.2s"


def test_without_a_uv_binary_pip_installs_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip stays for the one case uv cannot serve, a platform with no uv binary: the set builds with pip
    (its lock, its own log), copies its files and reports no progress."""
    monkeypatch.setattr(uv, "uv_binary", lambda: None)
    settings = make_settings(tmp_path, backend="process")
    with TestClient(create_app(settings)) as client:
        result = evaluate(client, CODE.format(module="six"), packages={"six": "1.16.0"})
        assert result["score"] == 1.0, result
        view = client.get(f"/v1/runtimes/{result['runtime']['id']}").json()
        assert view["lock"] == ["six==1.16.0"]
        assert "Successfully installed six-1.16.0" in view["log_tail"], view["log_tail"]
        assert not (tmp_path / "package-store").exists()
