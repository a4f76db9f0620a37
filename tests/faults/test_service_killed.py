"""The service SIGKILLed during a dataset upload and during a runtime build (the real ``serve`` process).

No half dataset is ever listed and no half-built runtime is ever served: the next service on
the data dir sweeps what the killed one left (the upload's temporary file, the build's partial
directory), and the next attempt succeeds.

The three scenarios are independent (each its own data dir, services and build): they run at once
(:class:`~tests.support.ahead.Ahead`), each judged by its own checks in its own test.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.ahead import Ahead, selected
from tests.support.faults import tiny_wheel
from tests.support.service import serving
from tests.support.wait import wait_until

JSONL = {"content-type": "application/jsonl"}


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ahead]:
    """The module's selected scenarios, started at once (each on a temporary directory of its own)."""
    run = {  # each test's scenario
        test_a_service_killed_mid_upload_lists_no_half_dataset_and_the_next_upload_succeeds: _killed_mid_upload,
        test_a_service_killed_mid_build_never_serves_the_half_built_runtime_and_the_next_build_succeeds: (
            _killed_mid_build
        ),
        test_on_docker_a_service_killed_mid_build_leaves_no_image_no_build_box_and_the_next_build_succeeds: (
            _killed_mid_docker_build
        ),
    }
    by_name = {test.__name__: scenario for test, scenario in run.items()}
    chosen = [by_name[item.originalname] for item in selected(request)]
    ahead = Ahead(at_once=max(1, len(chosen)), name="service-killed")
    for scenario in chosen:
        ahead.start(scenario, scenario, tmp_path_factory.mktemp(scenario.__name__))
    try:
        yield ahead
    finally:
        ahead.close()


def _slow_rows(stop: threading.Event) -> Iterator[bytes]:
    """JSON lines, a chunk at a time, until ``stop`` (the upload never completes by itself)."""
    i = 0
    while not stop.is_set():
        yield b"".join(b'{"i": %d, "outputs": "x"}\n' % (i + k) for k in range(500))
        i += 500
        time.sleep(0.01)


def test_a_service_killed_mid_upload_lists_no_half_dataset_and_the_next_upload_succeeds(scenarios: Ahead) -> None:
    scenarios.outcome(_killed_mid_upload)  # its checks ran in the scenario; a failed one is raised here


def test_a_service_killed_mid_build_never_serves_the_half_built_runtime_and_the_next_build_succeeds(
    scenarios: Ahead,
) -> None:
    scenarios.outcome(_killed_mid_build)


@pytest.mark.docker
def test_on_docker_a_service_killed_mid_build_leaves_no_image_no_build_box_and_the_next_build_succeeds(
    scenarios: Ahead,
) -> None:
    scenarios.outcome(_killed_mid_docker_build)


def _killed_mid_upload(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stop = threading.Event()
    with serving(data_dir, "process") as (client, proc):
        failed: list[BaseException] = []

        def upload() -> None:
            try:
                with httpx.Client(base_url=client.base_url, timeout=60) as uploader:
                    uploader.post("/v1/datasets", content=_slow_rows(stop), headers=JSONL)
            except httpx.TransportError as exc:  # the service died under it: expected
                failed.append(exc)

        sender = threading.Thread(target=upload, daemon=True)
        sender.start()
        datasets = data_dir / "datasets"
        wait_until(
            lambda: any(p.stat().st_size > 1 << 16 for p in datasets.glob(".up*")),
            120,
            what="the upload to reach the disk",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        stop.set()
        sender.join(timeout=30)
        assert failed, "the upload should have been cut by the kill"
    assert any(datasets.glob(".upload-*"))  # what the killed service left

    with serving(data_dir, "process") as (client, _proc):
        assert client.get("/v1/datasets").json()["data"] == []
        assert not [p.name for p in datasets.iterdir()]  # swept at start
        again = client.post("/v1/datasets", content=b'{"a": 1}\n{"a": 2}\n', headers=JSONL)
        assert again.status_code == 201 and again.json()["row_count"] == 2
        assert [d["id"] for d in client.get("/v1/datasets").json()["data"]] == [again.json()["id"]]


def _killed_mid_build(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, pad_kib=4096)
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    body = {
        "name": "pinned",
        "language": "python",
        "packages": {"evhtiny": "1.0"},
        "code": "import evhtiny\n\ndef evaluate(inputs, outputs, trace):\n    return evhtiny.VALUE / 42\n",
    }
    runtimes = data_dir / "runtimes"
    with serving(data_dir, "process", env=env) as (client, proc):
        _save_in_background(client, body)
        wait_until(lambda: any(runtimes.glob(".*.partial-*")), 120, 0.005, what="the build to start")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    time.sleep(1)  # the orphaned installer may still be writing into its partial directory
    assert not [p for p in runtimes.iterdir() if (p / "manifest.json").exists()]  # never completed

    with serving(data_dir, "process", env=env) as (client, _proc):
        assert client.get("/v1/evaluators").json()["data"] == []
        saved = client.post("/v1/evaluators", json=body)
        assert saved.status_code == 201, saved.text
        answer = client.post(f"/v1/evaluators/{saved.json()['id']}/evaluate", json={"inputs": {}, "outputs": None})
        assert answer.status_code == 200 and answer.json()["score"] == 1.0, answer.text
        partials = [p.name for p in runtimes.glob(".*.partial-*")]
        assert partials == [], partials  # the dead build's partial directory was swept


def _killed_mid_docker_build(tmp_path: Path) -> None:
    import docker

    from evaluator_host.sandbox.docker.engine import Engine
    from evaluator_host.settings import Settings

    data_dir = tmp_path / "data"
    wheels = tmp_path / "wheels"
    version = f"1.0.{uuid.uuid4().int % 10**9}"  # a package set no earlier run has an image of
    tiny_wheel(wheels, version=version, pad_kib=4096)
    # (the image path's build boxes: the store mode off; a store build is the process backend's, killed above)
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "EVALUATOR_HOST_DOCKER_RUNTIME_STORE": "0"}
    body = {
        "name": "pinned",
        "language": "python",
        "packages": {"evhtiny": version},
        "code": "import evhtiny\n\ndef evaluate(inputs, outputs, trace):\n    return evhtiny.VALUE / 42\n",
    }
    engine = docker.from_env(timeout=60)

    def images() -> list[str]:
        # the low-level list, its labels read from the summary: the SDK's `images.list` inspects each image, and
        # the other test process removes runtime images of its own (one gone between the list and its inspect: 404)
        found = engine.api.images(filters={"label": "evaluator-host.packages"})
        return [i["Id"] for i in found if version in (i.get("Labels") or {}).get("evaluator-host.packages", "")]

    def build_boxes(owner_of: set[str] | None = None) -> list[dict[str, Any]]:
        # the low-level list: no inspect per container (a box may go between the list and the inspect)
        boxes = engine.api.containers(all=True, filters={"label": "evaluator-host.build=1"})
        return [c for c in boxes if owner_of is None or c["Labels"].get("evaluator-host.owner") in owner_of]

    try:
        # this data dir's boxes only: another test's service may have one of its own on the engine now, even one
        # running an install (waiting on any box's install once let a run kill this service before its own began)
        owners = {Engine(Settings(data_dir=data_dir)).owner}
        with serving(data_dir, "docker", env=env) as (client, proc):
            _save_in_background(client, body)
            # the install is under way in this service's build box (an exec running pip in it)
            wait_until(
                lambda: any(_execs(engine, box) for box in build_boxes(owners)), 120, 0.02, what="the install to run"
            )
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        killed_at = time.monotonic()
        wait_until(lambda: not build_boxes(owners), 30, what="the killed service's build boxes to go")
        assert time.monotonic() - killed_at <= 10.0 + 1.0  # by themselves, no service running (issue: 10 s)
        assert images() == []  # nothing of the half-done build was ever tagged

        with serving(data_dir, "docker", env=env) as (client, _proc):
            assert client.get("/v1/evaluators").json()["data"] == []
            saved = client.post("/v1/evaluators", json=body, timeout=300)
            assert saved.status_code == 201, saved.text
            answer = client.post(f"/v1/evaluators/{saved.json()['id']}/evaluate", json={"inputs": {}, "outputs": None})
            assert answer.status_code == 200 and answer.json()["score"] == 1.0, answer.text
            assert len(images()) == 1
    finally:
        for image in images():
            engine.images.remove(image, force=True)
        engine.close()


def _execs(engine: Any, box: dict[str, Any]) -> bool:
    """Whether an exec (the install) is running in the container ``box``."""
    try:
        return bool(engine.api.inspect_container(box["Id"]).get("ExecIDs"))
    except Exception:  # it went meanwhile
        return False


def _save_in_background(client: httpx.Client, body: dict[str, Any]) -> None:
    """``POST /v1/evaluators`` with ``body`` from a thread (its build runs while the test kills the
    service, which cuts the request: expected)."""

    def save() -> None:
        try:
            with httpx.Client(base_url=client.base_url, timeout=300) as saver:
                saver.post("/v1/evaluators", json=body)
        except httpx.TransportError:
            pass

    threading.Thread(target=save, daemon=True).start()
