"""The docker backend: hardened containers, runtime images, spares, engine failures, sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import RuntimeKey
from evaluator_host.sandbox.docker import janitor
from evaluator_host.sandbox.docker.backend import DockerBackend
from evaluator_host.sandbox.docker.engine import MANAGED, OWNER, Engine
from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder
from evaluator_host.sandbox.docker.worker import DockerWorker
from tests.support import zygote
from tests.support.backends import SESSION_ID, SESSION_LABEL, docker_only, managed_containers
from tests.support.processes import reading_stdin
from tests.support.service import assert_healthy, evaluate, make_settings, serving
from tests.support.wait import wait_until

pytestmark = [pytest.mark.docker, docker_only]

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # its spare build box at start (not 10 s in, the default): the build box test inspects it
    settings = make_settings(tmp_path_factory.mktemp("docker-service"), backend="docker", spare_build_box_after_s=0)
    with TestClient(create_app(settings)) as client:
        yield client


def _backend(client: TestClient) -> DockerBackend:
    backend = client.app.state.services.backend  # type: ignore[attr-defined]
    assert isinstance(backend, DockerBackend)
    return backend


def _spares(client: TestClient) -> Callable[[RuntimeKey], list[DockerWorker]]:
    """The pool's spare containers of a runtime key, as a function (the pool owns the spares)."""
    pool = client.app.state.services.pool  # type: ignore[attr-defined]
    return lambda key: pool.spares.of(key)  # type: ignore[no-any-return]


def _containers(owner: str) -> list[dict[str, Any]]:
    """Inspections of the service's containers (one removed between the listing and its inspection is left out)."""
    client = docker.from_env()
    found = []
    try:
        for cid in managed_containers(owner):
            with contextlib.suppress(docker.errors.NotFound):
                found.append(client.api.inspect_container(cid))
        return found
    finally:
        client.close()


def test_every_container_runs_with_the_hardened_settings(service: TestClient) -> None:
    assert evaluate(service, "def evaluate(inputs, outputs, trace):\n    return 1\n")["score"] == 1.0
    backend = _backend(service)
    every = _containers(backend.engine.owner)
    found = [info for info in every if "evaluator-host.build" not in info["Config"]["Labels"]]
    assert found
    for info in found:
        host, config = info["HostConfig"], info["Config"]
        assert host["NetworkMode"] == "none"
        assert config.get("NetworkDisabled") is True  # no libnetwork set-up at all
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert host["Privileged"] is False
        assert host["PidsLimit"] == backend.settings.pids_max
        # capped, swap included: at the runtime's memory_mb (the module's other tests leave workers of their own
        # settings, e.g. 64 MiB, in any order); this test's default evaluation is checked at 256 below
        assert host["Memory"] == host["MemorySwap"] > 0
        assert host["NanoCpus"] == int(backend.settings.cpus * 1e9)
        assert host["Init"] is True
        assert "noexec" in host["Tmpfs"]["/tmp"]
        assert config["User"] == "65534:65534"
        assert config["Labels"][MANAGED] == "1" and config["Labels"][OWNER] == backend.engine.owner
        assert config["Labels"][SESSION_LABEL] == SESSION_ID  # the operator's container_labels (the tests' own)
        assert info["Name"].startswith("/evh-")
        for mount in info["Mounts"]:
            assert mount["RW"] is False, mount
            assert "docker.sock" not in mount["Source"]
    assert 256 * MIB in {info["HostConfig"]["Memory"] for info in found}  # the default memory_mb's worker


def test_a_service_that_never_builds_starts_no_build_box_before_its_spare_build_box_after_s(tmp_path: Path) -> None:
    """Start-up keeps the machine for what requests wait for: the spare build box waits
    ``spare_build_box_after_s`` (or a first build); the worker spares start at once."""
    settings = make_settings(tmp_path / "data", backend="docker", spare_build_box_after_s=3600)
    with TestClient(create_app(settings)) as client:
        assert evaluate(client, "def evaluate(inputs, outputs, trace):\n    return 1\n")["score"] == 1.0
        owner = _backend(client).engine.owner

        def started() -> list[dict[str, str]] | None:  # the evaluation's worker and the two families' spares
            labels = [found["Config"]["Labels"] for found in _containers(owner)]
            return labels if len(labels) >= 3 else None

        labels = wait_until(started, 60, what="the worker and the spares")
        assert not any("evaluator-host.build" in found for found in labels), labels


def test_the_spare_build_box_is_started_but_held_down(service: TestClient) -> None:
    """The build box kept for the next package set: no network but the build relay's socket, no caps
    but CHOWN (its root set-up exec), no host write; installs in it run as the build uid (issue 28)."""
    backend = _backend(service)
    boxes = wait_until(
        lambda: [i for i in _containers(backend.engine.owner) if "evaluator-host.build" in i["Config"]["Labels"]],
        30,
        what="the build box",
    )
    assert len(boxes) == 1
    host, config = boxes[0]["HostConfig"], boxes[0]["Config"]
    assert boxes[0]["State"]["Running"] is True
    assert config["Cmd"] == ["sleep", "infinity"]
    assert not [e for e in config["Env"] or [] if e.upper().startswith(("PIP", "HTTP", "EVALUATOR", "DOCKER"))]
    assert (
        host["CapDrop"] == ["ALL"] and host["CapAdd"] == ["CHOWN"] and "no-new-privileges:true" in host["SecurityOpt"]
    )
    assert host["NetworkMode"] == "none"
    assert any(m["Destination"] == "/sandbox/relay.sock" for m in boxes[0]["Mounts"])
    assert host["PidsLimit"] and host["Init"] is True and host["Privileged"] is False
    assert boxes[0]["Mounts"] and all(m["RW"] is False and "docker.sock" not in m["Source"] for m in boxes[0]["Mounts"])
    assert any(m["Destination"] == "/build" for m in boxes[0]["Mounts"])


def test_inside_the_container(service: TestClient) -> None:
    code = (
        "import os, socket\n\ndef evaluate(inputs, outputs, trace):\n"
        "    status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
        "    mounts = {l.split()[1]: l.split()[3] for l in open('/proc/mounts')}\n"
        "    try:\n        open('/evil', 'w')\n        root_writable = True\n"
        "    except OSError:\n        root_writable = False\n"
        "    return {'score': 1, 'uid': os.getuid(), 'cap_eff': status['CapEff'].strip(),\n"
        "            'no_new_privs': status['NoNewPrivs'].strip(), 'root_writable': root_writable,\n"
        "            'tmp': mounts['/tmp'], 'ifaces': [n for _, n in socket.if_nameindex()],\n"
        "            'env': sorted(os.environ)}\n"
    )
    details = evaluate(service, code)["details"]
    assert details["uid"] == 65534
    assert int(details["cap_eff"], 16) == 0
    assert details["no_new_privs"] == "1"
    assert details["root_writable"] is False
    assert "noexec" in details["tmp"]
    assert details["ifaces"] == ["lo"]
    assert not [k for k in details["env"] if "DOCKER" in k or "EVALUATOR_HOST" in k or k.startswith("PIP")]


def test_fork_bomb_is_held_by_the_pids_limit(service: TestClient) -> None:
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    n = 0\n    while True:\n        try:\n            if os.fork() == 0:\n"
        "                os.read(os.open('/dev/zero', 0), 0) or __import__('time').sleep(60)\n"
        "            n += 1\n        except OSError:\n            return n\n"
    )
    result = evaluate(service, code, settings={"timeout_s": 10})
    assert result["status"] == "ok", result
    assert result["score"] < _backend(service).settings.pids_max
    assert_healthy(service)


def test_memory_bomb_is_the_engines_oom_kill(service: TestClient) -> None:
    # 90 MB, touched: within the harness's own address-space limit (memory_mb + 64 MB: a bigger one is a
    # MemoryError that keeps the worker, tests/api/test_failing_fast.py) but past the container's 64 MB
    code = "def evaluate(inputs, outputs, trace):\n    x = bytearray(90 * 1024 * 1024)\n    return 1\n"
    result = evaluate(service, code, settings={"memory_mb": 64, "timeout_s": 20})
    assert result["status"] == "memory_limit"
    assert result["error"]["type"] == "MemoryLimit"  # reported from State.OOMKilled, not a MemoryError
    assert_healthy(service)


def test_a_worker_that_kills_itself_is_an_error_not_a_memory_limit(service: TestClient) -> None:
    """Exit 137 without the engine's OOMKilled flag: the flag is waited for (it can lag the exit on a loaded host;
    the wait itself: tests/unit/test_oom_flag.py), and the answer stays what happened — the process exited, not a
    memory limit and not the evaluation's timeout."""
    code = "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    result = evaluate(service, code, settings={"timeout_s": 20})
    assert result["status"] == "error", result
    assert result["error"]["type"] == "WorkerExited"
    assert "code 137" in result["error"]["message"]
    assert_healthy(service)


def test_kill_minus_one_inside_the_container(service: TestClient) -> None:
    code = "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n    os.kill(-1, signal.SIGKILL)\n    return 1\n"
    result = evaluate(service, code, settings={"timeout_s": 5})
    assert result["status"] in ("ok", "error"), result
    assert_healthy(service)


def test_a_new_revision_is_bound_to_a_prestarted_container(service: TestClient) -> None:
    backend, spares_of = _backend(service), _spares(service)
    evaluate(service, "def evaluate(inputs, outputs, trace):\n    return 1\n")
    key = RuntimeKey("python", backend.builder.base_id(), 256)
    wait_until(lambda: any(w.alive for w in spares_of(key)), 30, what="a spare container")
    spares = {w.container_id for w in spares_of(key)}
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1, 'cg': open('/proc/self/cgroup').read()}\n"
    cgroup = evaluate(service, code)["details"]["cg"]
    assert any(cid in cgroup for cid in spares), "the new revision did not get a pre-started container"


def test_containers_left_by_a_crashed_service_are_swept_at_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, backend="docker")
    engine = Engine(settings)
    client = docker.from_env()
    try:
        leftover = client.containers.create(
            settings.base_image, ["sleep", "600"], labels=engine.labels(), name=f"evh-{engine.owner}-leftover"
        )
        stranger = client.containers.create(
            settings.base_image, ["sleep", "600"], labels={MANAGED: "1", OWNER: "someone-else"}
        )
        try:
            backend = DockerBackend(settings, engine)
            # the engine's summaries, one request (``containers.list`` inspects each one it listed: a container
            # another test removes in between fails it with a 404, as a loaded full run showed)
            remaining = {c["Id"] for c in client.api.containers(all=True)}
            assert leftover.id not in remaining  # ours: swept
            assert stranger.id in remaining  # another service's: left alone
            asyncio.run(backend.close())
        finally:
            stranger.remove(force=True)
            with contextlib.suppress(docker.errors.NotFound):
                leftover.remove(force=True)
    finally:
        client.close()


def test_removers_racing_for_the_same_containers_all_end_with_them_gone(tmp_path: Path) -> None:
    """A killed service's janitor and the next service's start-up sweep remove the same containers at once: the
    loser's 409 ("removal ... already in progress") once made the new service exit at start (a full run's resume
    test). Three sweeps of one data dir at once all return, and every container is gone."""
    settings = make_settings(tmp_path, backend="docker")
    engines = [Engine(settings) for _ in range(3)]
    client = docker.from_env()
    made = [
        client.containers.run(settings.base_image, ["sleep", "600"], detach=True, labels=engines[0].labels())
        for _ in range(4)
    ]
    try:
        start = threading.Barrier(len(engines))

        def sweep(engine: Engine) -> int:
            start.wait()
            return engine.sweep_sync()

        with ThreadPoolExecutor(len(engines)) as pool:
            counts = list(pool.map(sweep, engines, timeout=120))  # (a sweep's error is raised here)
        assert len(counts) == len(engines)
        assert managed_containers(engines[0].owner) == set()
    finally:
        for container in made:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        for engine in engines:
            engine.close()
        client.close()


@pytest.mark.parametrize("stop", ["sigkill", "sigterm-then-sigkill-2s-later"])
def test_no_container_outlives_its_service_by_more_than_10_s(tmp_path: Path, stop: str) -> None:
    """A service killed (a crash, or a supervisor's stop that runs out of patience) leaves no worker,
    spare or build box behind, although no service starts on its data dir again: its janitor
    removes them."""
    data_dir = tmp_path / "data"
    owner = Engine(make_settings(data_dir)).owner
    with serving(data_dir, backend="docker", env={"EVALUATOR_HOST_SPARE_BUILD_BOX_AFTER_S": "0"}) as (client, proc):
        code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
        assert client.post("/v1/evaluate", json={"language": "python", "code": code}).json()["status"] == "ok"

        def started() -> bool:  # the spare build box starts in the background: a build box, and workers
            labels = [c["Labels"] for c in docker.from_env().api.containers(filters={"label": f"{OWNER}={owner}"})]
            return any("evaluator-host.build" in c for c in labels) and len(labels) >= 2

        wait_until(started, 60, 0.2, what="a build box and workers")
        if stop != "sigkill":
            proc.terminate()
            time.sleep(2)
        proc.kill()
        proc.wait()
        wait_until(lambda: managed_containers(owner) == set(), 10, 0.2, what="the service's containers to go")


def test_the_janitors_sdk_free_listing_is_the_engines_own(service: TestClient) -> None:
    """What a janitor asks the local engine's socket without the docker SDK (its first look at a clean end) lists
    exactly the containers the SDK lists for the same owner (none of another owner's)."""
    owner = _backend(service).engine.owner
    api = docker.from_env().api

    def same() -> bool:  # (a spare may start between two listings: the same once the service is quiet)
        sdk = {c["Id"] for c in api.containers(all=True, filters={"label": [f"{MANAGED}=1", f"{OWNER}={owner}"]})}
        raw = janitor.listed_locally(owner)
        return bool(sdk) and raw is not None and {c["Id"] for c in raw} == sdk

    wait_until(same, 60, 0.2, what="the same listing both ways")
    assert janitor.listed_locally("no-such-owner") == []


def test_the_janitor_removes_what_its_service_created_though_the_engine_finished_it_after_the_death(
    tmp_path: Path,
) -> None:
    """A create the service asked for just before it died may be finished by a busy engine seconds later,
    its creation time past the death: the janitor knows it by the service's instance label and removes it.
    What the next service on the data dir creates (another instance) after the first look stays — a next service
    started at once once lost its first build box to a janitor that took "created up to a second after the death"
    for the dead service's (the rule itself, creation second by second: tests/unit/test_janitor_rule.py). An
    earlier instance's leftover, older than the death's second, goes at the first look."""
    settings = make_settings(tmp_path, backend="docker")
    earlier, dead, later = Engine(settings), Engine(settings), Engine(settings)
    assert dead.owner == later.owner and dead.instance != later.instance
    client = docker.from_env()
    keeper = janitor.spawn(settings, dead.owner, dead.instance)
    made: list[Any] = []

    def ids() -> set[str]:
        return {c["Id"] for c in client.api.containers(all=True, filters={"label": f"{OWNER}={dead.owner}"})}

    try:
        assert keeper.stdin is not None
        leftover = client.containers.create(settings.base_image, ["sleep", "600"], labels=earlier.labels())
        made.append(leftover)
        # as a service's janitor, started long before its death: waiting on its stdin (a loaded machine may take
        # seconds to start it, and its "death" is when it reads the end: the containers below would predate it)
        wait_until(lambda: reading_stdin(keeper.pid), 60, 0.05, what="the janitor to wait for its service's end")
        time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))  # (the leftover's creation second is over)
        keeper.stdin.close()  # the service is gone
        wait_until(lambda: leftover.id not in ids(), 30, 0.02, what="the janitor's first look")
        newer = client.containers.create(settings.base_image, ["sleep", "600"], labels=later.labels())
        made.append(newer)
        late = client.containers.create(settings.base_image, ["sleep", "600"], labels=dead.labels())
        made.append(late)
        wait_until(lambda: late.id not in ids(), 20, 0.2, what="the janitor to remove the late container")
        assert keeper.wait(timeout=30) == 0  # (its last look, 9 s after the death, is over)
        assert newer.id in ids()
    finally:
        for container in made:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        client.close()


@pytest.mark.network
def test_containers_removed_from_outside_are_replaced_transparently(tmp_path: Path) -> None:
    """Regression: a build box or spare removed under the service (another process's sweep, an operator's
    `docker rm`) made the next request a bare-text 500; now a fresh one takes its place."""
    pins = {"six": "1.15.0"}  # a set no other test builds: its build must use the (vanished) build box
    builder = _fresh_builder(tmp_path / "b", pins)
    builder.close()
    settings = make_settings(tmp_path / "data", backend="docker", spare_build_box_after_s=0)
    with TestClient(create_app(settings)) as client:
        code = "def evaluate(inputs, outputs, trace):\n    return 1\n"
        assert evaluate(client, code)["score"] == 1.0
        backend = _backend(client)
        wait_until(  # the spares and the build box are up
            lambda: any("evaluator-host.build" in i["Config"]["Labels"] for i in _containers(backend.engine.owner)), 30
        )
        engine = docker.from_env()
        try:
            for cid in managed_containers(backend.engine.owner):
                engine.api.remove_container(cid, force=True)
        finally:
            engine.close()
        time.sleep(1)
        answers = [
            client.post("/v1/evaluate", json={"language": "python", "code": code}),  # its bound worker: gone
            client.post("/v1/evaluate", json={"language": "python", "code": code.replace("1", "2")}),  # a spare
            client.post("/v1/evaluate", json={"language": "python", "code": code, "packages": pins}),  # build box
            client.post(
                "/v1/evaluate",
                json={"language": "javascript", "code": "function evaluate(inputs, outputs, trace) { return 1 }"},
            ),
        ]
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
        assert [a.json()["status"] for a in answers] == ["ok"] * 4, [a.text for a in answers]
        assert_healthy(client)


# -- runtime images ----------------------------------------------------------------------------
def _fresh_builder(tmp_path: Path, pins: dict[str, str], **overrides: Any) -> DockerRuntimeBuilder:
    """A builder of runtime *images* (store mode off: these tests are the image path's, which npm sets and a
    host the store mode does not fit take; tests/sandbox/test_docker_store.py is the store mode's)."""
    settings = make_settings(tmp_path, **{"docker_runtime_store": False, **overrides})
    builder = DockerRuntimeBuilder(settings, Engine(settings))
    assert builder.remove(builder.runtime_for("python", pins))
    return builder


@pytest.mark.network
def test_concurrent_requests_for_one_set_build_one_image(tmp_path: Path) -> None:
    pins = {"six": "1.14.0"}  # a set no running service uses, so its image can be removed first
    builder = _fresh_builder(tmp_path, pins)

    async def go() -> set[str]:
        return {r.location or "" for r in await asyncio.gather(*(builder.ensure("python", pins) for _ in range(4)))}

    images = asyncio.run(go())
    assert len(images) == 1 and builder.builds == 1
    client = docker.from_env()
    try:
        image = client.images.get(builder.tag(builder.runtime_for("python", pins)))
        labels = image.labels
        assert json.loads(labels["evaluator-host.packages"]) == pins
        assert "six==1.14.0" in json.loads(labels["evaluator-host.lock"])
        assert labels["evaluator-host.base-image"] == builder.base_id()
        # nothing of the build (pip.conf, CA, index settings) is in the image's config
        assert not image.attrs["Config"].get("Volumes")  # no anonymous volume in runtime containers
        assert not any("PIP" in str(v) or "/build/" in str(v) for v in image.attrs["Config"].values())
    finally:
        client.close()
    log = (tmp_path / "images" / f"{builder.runtime_for('python', pins)}.build.log").read_text()
    assert "six" in log
    # another service process finds the image: zero builds
    again = DockerRuntimeBuilder(builder.settings, Engine(builder.settings))
    assert asyncio.run(again.ensure("python", pins)).location in images and again.builds == 0


@pytest.mark.network
def test_a_failed_build_is_an_error_with_pips_message_and_no_image(tmp_path: Path) -> None:
    pins = {"six": "0.0.424242"}
    builder = _fresh_builder(tmp_path, pins)
    with pytest.raises(BuildError) as info:
        asyncio.run(builder.ensure("python", pins))
    assert "0.0.424242" in info.value.output
    assert builder.remove(builder.runtime_for("python", pins))  # nothing to remove: no image was made
    assert builder.builds == 0
    assert (tmp_path / "images" / f"{builder.runtime_for('python', pins)}.build.log").exists()


@pytest.mark.network
def test_the_ca_bundle_setting_is_what_lets_builds_through_the_proxy(tmp_path: Path) -> None:
    """With only the network index, a wrong CA fails the TLS handshake; the system bundle works."""
    pins = {"six": "1.15.0"}
    bogus = tmp_path / "bogus-ca.pem"
    bogus.write_text("")  # trusts nothing
    builder = _fresh_builder(tmp_path / "a", pins, ca_bundle=bogus)
    builder.boxes._pip = {"index-url": "https://pypi.org/simple", "retries": "0", "timeout": "15"}
    with pytest.raises(BuildError) as info:
        asyncio.run(builder.ensure("python", pins))
    assert "ssl" in info.value.output.lower(), info.value.output
    good_settings = make_settings(tmp_path / "b", docker_runtime_store=False)
    good = DockerRuntimeBuilder(good_settings, Engine(good_settings))
    good.boxes._pip = {"index-url": "https://pypi.org/simple"}
    assert "six==1.15.0" in asyncio.run(good.ensure("python", pins)).lock


@pytest.mark.network
def test_a_second_evaluator_on_the_same_set_builds_nothing(service: TestClient) -> None:
    builder = _backend(service).builder
    pins = {"six": "1.16.0"}
    first = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return 1\n"
    second = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return {'score': 1, 'v': six.__version__}\n"
    evaluate(service, first, packages=pins)
    builds = builder.builds
    result = evaluate(service, second, packages=pins)
    assert result["details"]["v"] == "1.16.0" and builder.builds == builds


@pytest.mark.network
def test_images_cli_lists_builds_and_prunes(tmp_path: Path) -> None:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path), "EVALUATOR_HOST_DOCKER_RUNTIME_STORE": "0"}
    cli = [sys.executable, "-m", "evaluator_host.cli", "images"]
    built = zygote.run([*cli, "build", "--packages", '{"six": "1.15.0"}'], capture_output=True, text=True, env=env)
    assert built.returncode == 0 and "six==1.15.0" in built.stdout, built.stderr
    listing = zygote.run([*cli, "list", "--json"], capture_output=True, text=True, env=env, check=True)
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    six = [r for r in rows if r["packages"] == {"six": "1.15.0"}]
    assert six and six[0]["lock"] == ["six==1.15.0"] and six[0]["size_bytes"] > 0
    assert six[0]["last_used"] is None  # built, never run by this data dir
    rid = six[0]["runtime_id"]
    pruned = zygote.run([*cli, "prune", "--runtime", rid], capture_output=True, text=True, env=env)
    assert pruned.returncode == 0 and six[0]["runtime_id"] in pruned.stdout
    listing = zygote.run([*cli, "list", "--json"], capture_output=True, text=True, env=env, check=True)
    assert six[0]["runtime_id"] not in listing.stdout


# -- the engine going away and coming back -----------------------------------------------------
class _Forwarder:
    """A unix-socket relay to the real engine that can be cut and restored (an engine outage)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None

    def start(self) -> None:
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(self.path))
        self._server.listen(64)
        threading.Thread(target=self._accept, args=(self._server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect("/var/run/docker.sock")
            self._conns += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self.path.unlink()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self._conns.clear()


def test_engine_down_is_503_with_retry_after_and_the_service_recovers(tmp_path: Path) -> None:
    relay = _Forwarder(tmp_path / "engine.sock")
    relay.start()
    settings = make_settings(tmp_path / "data", backend="docker", docker_host=f"unix://{relay.path}")
    code = "def evaluate(inputs, outputs, trace):\n    return 1\n"
    try:
        with TestClient(create_app(settings)) as client:
            assert evaluate(client, code)["score"] == 1.0
            relay.stop()
            time.sleep(0.2)
            down = client.post("/v1/evaluate", json={"language": "python", "code": code + "# new\n"})
            assert down.status_code == 503, down.text
            assert int(down.headers["Retry-After"]) > 0
            assert down.json()["error"]["type"] == "BackendUnavailable"
            assert client.get("/healthz").status_code == 200
            relay.start()
            assert evaluate(client, code)["score"] == 1.0
            assert_healthy(client)
    finally:
        with contextlib.suppress(Exception):
            relay.stop()
        Engine(make_settings(tmp_path / "data")).sweep_sync()  # what the cut relay kept us from removing


def test_make_images_never_takes_a_runtime_image_for_the_base() -> None:
    """Every image built FROM the base inherits its content label (runtime images, deploy/'s service,
    PostgreSQL and Redis images, a failed build's layers). Re-running the script must never tag one of
    them as the base: a CI run did, and a Redis image's ``USER redis`` and ``VOLUME /data`` reached every
    sandbox after it. The built base is found by its own ``evaluator-host/base-cache:KEY`` tag."""
    from tests.support import REPO

    script = [str(REPO / "sandbox_images" / "build_base.sh")]
    zygote.run(script, check=True, capture_output=True, timeout=1800)
    client = docker.from_env()
    tag = make_settings(Path("/tmp")).base_image
    derived_tag = "evaluator-host/test-derived-from-base:latest"
    try:
        base = client.images.get(tag)
        dockerfile = f'FROM {tag}\nUSER nobody\nVOLUME /data\nCMD ["sleep", "1"]\n'.encode()
        derived, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=derived_tag, rm=True, pull=False)
        assert derived.labels.get("evaluator-host.base-key") == base.labels["evaluator-host.base-key"]
        zygote.run(script, check=True, capture_output=True, timeout=600)  # "up to date": which image?
        again = client.images.get(tag)
        assert again.id == base.id != derived.id
        assert not again.attrs["Config"].get("Volumes") and again.attrs["Config"].get("User") != "nobody"
        cache = client.images.get(f"evaluator-host/base-cache:{base.labels['evaluator-host.base-key']}")
        assert cache.id == base.id
        assert "evaluator-host.runtime-id" not in again.labels
    finally:
        with contextlib.suppress(Exception):
            client.images.remove(derived_tag, force=True)
        client.close()


# -- Node ----------------------------------------------------------------------------------------
def test_node_workers_run_with_the_same_hardening(service: TestClient) -> None:
    code = (
        "const fs = require('fs'), os = require('os')\n"
        "function evaluate(i, o, t) {\n"
        "  const status = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').split('\\n')"
        ".filter((l) => l.includes(':\\t')).map((l) => l.split(':\\t')))\n"
        "  let rootWritable = true\n  try { fs.writeFileSync('/evil', 'x') } catch { rootWritable = false }\n"
        "  return { score: 1, uid: process.getuid(), capEff: status.CapEff.trim(),\n"
        "           noNewPrivs: status.NoNewPrivs.trim(),\n"
        "           rootWritable, ifaces: Object.keys(os.networkInterfaces()), node: process.version }\n}\n"
    )
    details = evaluate(service, code, "javascript")["details"]
    assert details["uid"] == 65534 and int(details["capEff"], 16) == 0 and details["noNewPrivs"] == "1"
    assert details["rootWritable"] is False
    assert details["ifaces"] in ([], ["lo"])
    assert details["node"].startswith("v24.")
    backend = _backend(service)
    for info in _containers(backend.engine.owner):
        if "evaluator-host.build" in info["Config"]["Labels"]:
            continue
        host = info["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]


def test_a_new_js_revision_binds_a_prestarted_node_container(service: TestClient) -> None:
    backend, spares_of = _backend(service), _spares(service)
    code = "function evaluate(i, o, t) {{ return {{ score: 1, n: {n} }} }}"
    assert evaluate(service, code.format(n=0), "javascript")["status"] == "ok"  # starts node spares
    key = RuntimeKey("node", backend.builder.base_id(), 256)
    spare = wait_until(lambda: spares_of(key), 30, what="a node spare")[0].container_id
    assert evaluate(service, code.format(n=1), "typescript")["status"] == "ok"
    assert spare not in {w.container_id for w in spares_of(key)}  # it was taken and bound


def test_npm_runtime_image_has_the_lock_and_nothing_of_the_build(tmp_path: Path) -> None:
    pins = {"is-number": "7.0.0"}
    settings = make_settings(tmp_path)
    builder = DockerRuntimeBuilder(settings, Engine(settings))
    assert builder.remove(builder.runtime_for("javascript", pins))
    runtime = asyncio.run(builder.ensure("javascript", pins))
    assert runtime.lock == ["is-number@7.0.0"] and builder.builds == 1
    client = docker.from_env()
    try:
        image = client.images.get(builder.tag(runtime.id))
        assert image.labels["evaluator-host.language"] == "node"
        assert json.loads(image.labels["evaluator-host.lock"]) == ["is-number@7.0.0"]
        listing = client.containers.run(
            runtime.location,
            ["sh", "-c", "ls -A /tmp /root /opt/evaluator/node; ls /opt/evaluator/node/node_modules"],
            remove=True,
            network_mode="none",
        ).decode()
        assert "is-number" in listing and "package-lock.json" in listing
        assert ".npm" not in listing and "node-compile-cache" not in listing and "npmrc" not in listing
        assert not any("npm" in str(v).lower() or "/build/" in str(v) for v in image.attrs["Config"].values())
    finally:
        client.close()
    assert builder.remove(runtime.id)
