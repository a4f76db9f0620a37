"""The service's image and the compose stack (issue 32), smoke-tested where an engine answers: deploy/build.sh
builds the images (the wheel's wheelhouse, the service, PostgreSQL and Redis from Debian packages, all FROM the
locally imported base), ``docker-compose up`` starts the stack on a free loopback port, and the service answers
``/healthz`` (on PostgreSQL, the process backend) and evaluates Python, JavaScript and TypeScript; then the
image's docker-backend run (the host's engine socket, a shared folder at the same path, the image's
unprivileged user) evaluates too. Bounded: every step has a timeout, and the stack goes down (volumes too) in
every case. Slow (it builds images); compose is Debian's ``docker-compose`` (``.ci/run`` installs it).
# TODO(client): switch these calls to the Python client (evaluator_host.client) once it is merged.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import evaluator_host
from evaluator_host.settings import Settings
from tests.support import REPO
from tests.support.backends import DOCKER_REQUIRED, docker_only
from tests.support.installed import call, evaluate_retrying_a_cold_start, run_dist
from tests.support.service import free_port
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.docker, docker_only]

COMPOSE = shutil.which("docker-compose")
CODES = {
    "python": "def evaluate(inputs, outputs, trace):\n    return {'score': float(outputs == 'ok')}\n",
    "javascript": "function evaluate(inputs, outputs, trace) { return { score: outputs === 'ok' ? 1 : 0 }; }\n",
    "typescript": "export const evaluate = (i: unknown, o: string, t: unknown) => ({ score: o === 'ok' ? 1 : 0 });\n",
}


def _authed(base: str, key: str, method: str, path: str, body: object = None) -> object:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback only
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:2000]!r}") from None


def _evaluates(base: str, key: str) -> None:
    for language, code in CODES.items():
        body = {"language": language, "code": code, "outputs": "ok"}
        result = evaluate_retrying_a_cold_start(lambda: _authed(base, key, "POST", "/v1/evaluate", body))  # noqa: B023
        assert isinstance(result, dict) and result["status"] == "ok" and result["score"] == 1.0, (language, result)


@functools.cache
def _privileged_works() -> bool:
    """Whether this engine starts a privileged container (an engine nested in a container may not); asked
    once (a container run) for the module's two compose stacks."""
    probe = ["docker", "run", "--rm", "--privileged", "--network", "none", Settings().base_image, "true"]
    return subprocess.run(probe, capture_output=True, timeout=120).returncode == 0


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """deploy/build.sh over a freshly built wheel: the service image's tag."""
    base = Settings().base_image
    tag = f"evaluator-host/service:test-{uuid.uuid4().hex[:8]}"
    _sdist, wheel = run_dist(tmp_path_factory.getbasetemp())
    env = {**os.environ, "BASE": base, "TAG": tag}
    subprocess.run([REPO / "deploy" / "build.sh", str(wheel)], cwd=REPO, env=env, check=True, timeout=900)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


@pytest.mark.skipif(
    COMPOSE is None and not DOCKER_REQUIRED, reason="no docker-compose (apt-get install docker-compose)"
)
def test_compose_stack_starts_and_evaluates_on_postgresql(images: str, tmp_path: Path) -> None:
    assert COMPOSE is not None, "docker-compose is missing (.ci/run installs it)"
    port, key = free_port(), secrets.token_urlsafe(24)
    project = f"evhsmoke{uuid.uuid4().hex[:8]}"
    # the stack's own override: the service image just built; not privileged where this engine refuses
    # privileged containers (a nested engine): the process backend then runs in its weaker mode, as documented
    override = tmp_path / "override.yaml"
    privileged = "" if _privileged_works() else "    privileged: false\n"
    override.write_text(f"services:\n  evaluator-host:\n    image: {images}\n{privileged}")
    compose = [COMPOSE, "-p", project, "-f", str(REPO / "deploy" / "compose.yaml"), "-f", str(override)]
    env = {
        **os.environ,
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "EVALUATOR_HOST_API_KEYS": key,
        "EVALUATOR_HOST_PUBLISH_PORT": str(port),
        "EVALUATOR_HOST_PUBLISH_GRPC_PORT": str(free_port()),  # OTLP/gRPC's 4317, published on a free port
    }
    try:
        subprocess.run([*compose, "up", "-d", "--no-build"], env=env, check=True, timeout=300)
        base = f"http://127.0.0.1:{port}"

        def healthy() -> dict[str, object] | None:
            try:
                found: dict[str, object] = call(base, "GET", "/healthz", timeout=5)
            except AssertionError as exc:  # HAProxy's 503 until its health checks found a replica up
                if "/healthz: 503 " in str(exc):
                    return None
                raise
            return found if found.get("status") == "ok" else None

        health = wait_until(healthy, 180, 0.2, what="the stack's service to answer", ignoring=(OSError,))
        assert health["backend"] == "process" and health["version"] == evaluator_host.__version__
        _evaluates(base, key)
        assert call(base, "GET", "/healthz")["status"] == "ok"
    finally:
        logs = subprocess.run([*compose, "logs", "--tail", "40"], env=env, capture_output=True, text=True, timeout=60)
        subprocess.run([*compose, "down", "-v", "--timeout", "20"], env=env, capture_output=True, timeout=300)
        print(logs.stdout[-4000:])  # shown when the test fails


def test_the_image_runs_the_docker_backend_through_the_host_socket(images: str, tmp_path: Path) -> None:
    """docs/deploy.md's docker-backend run: the socket, its group, and a folder shared at the same path."""
    shared = Path(f"/tmp/evh-shared-{uuid.uuid4().hex[:8]}")  # the same path on the host and in the container
    shared.mkdir(mode=0o755)
    os.chown(shared, 10001, 10001)
    port, key, name = free_port(), secrets.token_urlsafe(24), f"evhsmoke-{uuid.uuid4().hex[:8]}"
    socket = "/var/run/docker.sock"
    run = [
        "docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000",
        "-v", f"{socket}:{socket}", "--group-add", str(os.stat(socket).st_gid),
        "-v", f"{shared}:{shared}", "-e", f"EVALUATOR_HOST_SHARED_DIR={shared}",
        "-e", "EVALUATOR_HOST_BACKEND=docker", "-e", f"EVALUATOR_HOST_BASE_IMAGE={Settings().base_image}",
        "-e", f"EVALUATOR_HOST_API_KEYS={key}", images,
    ]  # fmt: skip
    try:
        subprocess.run(run, check=True, timeout=120, capture_output=True)
        base = f"http://127.0.0.1:{port}"

        def healthy() -> dict[str, object] | None:
            found: dict[str, object] = call(base, "GET", "/healthz", timeout=5)
            return found if found.get("status") == "ok" else None

        health = wait_until(healthy, 180, 0.2, what="the container's service to answer", ignoring=(OSError,))
        assert health["backend"] == "docker"
        _evaluates(base, key)
    finally:
        logs = subprocess.run(["docker", "logs", "--tail", "40", name], capture_output=True, text=True, timeout=60)
        subprocess.run(["docker", "stop", "-t", "30", name], capture_output=True, timeout=120)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        shutil.rmtree(shared, ignore_errors=True)
        print(logs.stdout[-3000:], logs.stderr[-3000:])


@pytest.mark.skipif(
    COMPOSE is None and not DOCKER_REQUIRED, reason="no docker-compose (apt-get install docker-compose)"
)
def test_compose_stack_with_three_replicas_behind_haproxy_serves_py_js_ts_and_a_job_on_every_replica(
    images: str, tmp_path: Path
) -> None:
    """docs/deploy.md's ``docker compose up --scale evaluator-host=3`` (issue 54) on the image built above: HAProxy
    (deploy/haproxy.cfg, its image from Debian's package) finds the 3 replicas by compose's DNS; Python,
    JavaScript and TypeScript evaluations and a job (its dataset uploaded through one replica, started through
    another, its results paged through the balancer) all answer through HAProxy's one port, and every replica
    served requests (``X-Replica``)."""
    import httpx

    assert COMPOSE is not None, "docker-compose is missing (.ci/run installs it)"
    port, key = free_port(), secrets.token_urlsafe(24)
    project = f"evhreplicas{uuid.uuid4().hex[:8]}"
    override = tmp_path / "override.yaml"
    privileged = "" if _privileged_works() else "    privileged: false\n"
    override.write_text(f"services:\n  evaluator-host:\n    image: {images}\n{privileged}")
    compose = [COMPOSE, "-p", project, "-f", str(REPO / "deploy" / "compose.yaml"), "-f", str(override)]
    env = {
        **os.environ,
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "EVALUATOR_HOST_API_KEYS": key,
        "EVALUATOR_HOST_PUBLISH_PORT": str(port),
        "EVALUATOR_HOST_PUBLISH_GRPC_PORT": str(free_port()),
    }
    seen: list[str] = []
    try:
        subprocess.run([*compose, "up", "-d", "--no-build", "--scale", "evaluator-host=3"], env=env, check=True,
                       timeout=300)  # fmt: skip
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                            headers={"authorization": f"Bearer {key}"})  # fmt: skip

        def send(method: str, path: str, **kw: object) -> httpx.Response:
            answer = http.request(method, path, **kw)  # type: ignore[arg-type]
            assert answer.status_code < 400, (method, path, answer.status_code, answer.text[:2000])
            seen.append(answer.headers.get("x-replica", "?"))
            return answer

        def three_up() -> bool:  # HAProxy answers 503 until its checks found replicas up; wait for all three
            names = set()
            for _ in range(6):
                answer = http.get("/healthz", timeout=5)
                if answer.status_code != 200 or answer.json().get("status") != "ok":
                    return False
                names.add(answer.headers.get("x-replica", "?"))
            return len(names) == 3

        wait_until(three_up, 300, 0.25, what="HAProxy to see 3 healthy replicas", ignoring=(httpx.TransportError,))
        for language, code in CODES.items():
            for _ in range(3):  # round robin: each language through each replica
                body = {"language": language, "code": code, "outputs": "ok"}
                result = evaluate_retrying_a_cold_start(
                    lambda: send("POST", "/v1/evaluate", json=body).json()  # noqa: B023
                )
                assert result["status"] == "ok" and result["score"] == 1.0, (language, result)
        made = send("POST", "/v1/evaluators", json={"name": "stack", "language": "python", "code": CODES["python"]})
        rows = "".join(json.dumps({"i": i, "outputs": "ok" if i % 2 else "no"}) + "\n" for i in range(200))
        dataset = send("POST", "/v1/datasets", content=rows, headers={"content-type": "application/jsonl"})
        uploaded_through = seen[-1]
        job = send("POST", "/v1/jobs", json={"evaluator_id": made.json()["id"], "dataset_id": dataset.json()["id"]})
        assert seen[-1] != uploaded_through  # started through another replica than the upload's
        job_id = job.json()["id"]
        done = wait_until(
            lambda: (
                (j := send("GET", f"/v1/jobs/{job_id}", params={"wait_s": 30}).json())["status"]
                not in ("queued", "running")
                and j
            ),
            300,
            0.1,
            what="the job to finish",
        )
        assert done["status"] == "succeeded" and done["progress"]["done"] == 200, done
        indices: list[int] = []
        offset: int | None = 0
        while offset is not None:
            page = send("GET", f"/v1/jobs/{job_id}/results", params={"offset": offset, "limit": 50}).json()
            indices += [r["index"] for r in page["data"]]
            offset = page["next_offset"]
        assert sorted(indices) == list(range(200))
        assert done["aggregate"]["count"] == 200
        served = {name: seen.count(name) for name in set(seen)}
        assert len(served) == 3 and "?" not in served, served  # every replica served requests
        print(f"\nthrough HAProxy: {len(seen)} requests, per replica {served}")
    finally:
        logs = subprocess.run([*compose, "logs", "--tail", "30"], env=env, capture_output=True, text=True, timeout=60)
        subprocess.run([*compose, "down", "-v", "--timeout", "20"], env=env, capture_output=True, timeout=300)
        print(logs.stdout[-6000:])
