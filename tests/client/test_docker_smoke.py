"""The Python client against the real service on the docker backend: one smoke test (the other client
tests use the process backend; the client does not know which backend answers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator_host.client import Client, NotFoundError
from tests.support.backends import docker_only
from tests.support.client import live_service

pytestmark = [pytest.mark.docker, docker_only]


def test_the_client_evaluates_and_runs_a_job_on_the_docker_backend(tmp_path: Path) -> None:
    with live_service(tmp_path, backend="docker") as live, Client(live.url, live.key) as client:
        assert client.health()["backend"] == "docker"
        result = client.evaluate("def evaluate(inputs, outputs, trace):\n    return outputs * 2\n", outputs=0.25)
        assert (result.status, result.score) == ("ok", 0.5)
        ts = client.evaluate(
            "export function evaluate(i: any, o: string, t: any) { return o.length; }", "typescript", outputs="ab"
        )
        assert ts.score == 2.0
        evaluator = client.create_evaluator("docker-smoke", "def evaluate(inputs, outputs, trace):\n    return 1\n")
        job = client.wait_job(client.start_job(evaluator.id, rows=[{"outputs": i} for i in range(20)]), timeout_s=180)
        assert job.status == "succeeded" and [r.result.score for r in client.iter_results(job)] == [1.0] * 20
        with pytest.raises(NotFoundError):
            client.get_job("job_missing")
