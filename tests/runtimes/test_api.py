"""/v1/runtimes on the process backend: pre-build, follow, see the lock; builds announce themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api.app import create_app
from tests.support.service import make_settings
from tests.support.wait import wait_until

CODE = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("runtimes-api"), backend="process")
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def fresh_service(tmp_path: Path) -> Iterator[TestClient]:
    """A service of its own: a test that lists every runtime expects only its own (the module's ``service``
    holds what the module's other tests built, in whatever order they ran)."""
    with TestClient(create_app(make_settings(tmp_path / "data", backend="process"))) as test_client:
        yield test_client


def _until_done(client: TestClient, location: str, headers: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    def done() -> dict | None:  # type: ignore[type-arg]
        view = client.get(location, headers=headers).json()
        if view["status"] != "building":
            return view  # type: ignore[no-any-return]
        assert "elapsed_s" in view and view["elapsed_s"] is not None
        return None

    return wait_until(done, 120, 0.2, what="the build")  # type: ignore[no-any-return]


@pytest.mark.network
def test_post_builds_in_the_background_and_get_shows_pins_lock_size_and_duration(fresh_service: TestClient) -> None:
    service = fresh_service
    response = service.post("/v1/runtimes", json={"language": "python", "packages": {"six": "1.16.0"}})
    assert response.status_code == 202, response.text
    location = response.headers["location"]
    assert location == f"/v1/runtimes/{response.json()['id']}"
    assert response.json()["status"] in ("building", "ready")
    view = _until_done(service, location)
    assert view["status"] == "ready", view
    assert view["packages"] == {"six": "1.16.0"} and "six==1.16.0" in view["lock"]
    assert view["size_bytes"] > 10_000 and view["build_seconds"] > 0
    assert "six" in view["log_tail"]  # the end of pip's log
    # already built: 200, same place
    again = service.post("/v1/runtimes", json={"language": "python", "packages": ["six==1.16.0"]})
    assert again.status_code == 200 and again.headers["location"] == location
    listed = service.get("/v1/runtimes").json()
    assert [r["id"] for r in listed["data"]] == [view["id"]] and listed["count"] == 1
    # an evaluation on the pre-built runtime builds nothing and says nothing about builds
    answer = service.post("/v1/evaluate", json={"language": "python", "code": CODE, "packages": {"six": "1.16.0"}})
    assert answer.status_code == 200 and "x-runtime-build" not in answer.headers
    assert answer.json()["runtime"]["id"] == view["id"]
    # the first use is its last use
    assert service.get(location).json()["last_used"] is not None


@pytest.mark.network
def test_a_first_evaluation_that_builds_says_so_in_a_header(service: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    body = {"language": "python", "code": code, "packages": {"six": "1.15.0"}}
    first = service.post("/v1/evaluate", json=body)
    assert first.status_code == 200, first.text
    rid = first.json()["runtime"]["id"]
    note = first.headers["x-runtime-build"]
    assert note.startswith(f"built; runtime={rid}; duration=") and note.endswith("s")
    assert "x-runtime-build" not in service.post("/v1/evaluate", json=body).headers
    assert service.get(f"/v1/runtimes/{rid}").json()["status"] == "ready"


@pytest.mark.network
def test_a_failed_build_is_kept_with_the_installers_message_and_a_did_you_mean(service: TestClient) -> None:
    response = service.post("/v1/runtimes", json={"language": "python", "packages": {"six": "1.16.99"}})
    assert response.status_code == 202
    view = _until_done(service, response.headers["location"])
    assert view["status"] == "failed" and view["error"]["type"] == "BuildError"
    assert "did you mean six==1.16.0?" in view["error"]["suggestions"][0]
    assert "1.16.99" in view["log_tail"]


def test_unknown_runtime_is_404_and_an_empty_package_set_is_422(service: TestClient) -> None:
    assert service.get("/v1/runtimes/python-nope").status_code == 404
    empty = service.post("/v1/runtimes", json={"language": "python", "packages": {}})
    assert empty.status_code == 422 and empty.json()["error"]["type"] == "PackageSpecError"
    bad = service.post("/v1/runtimes", json={"language": "python", "packages": {"six": ">=1"}})
    assert bad.status_code == 422


@pytest.mark.network
def test_the_build_log_records_the_duration(service: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="evaluator_host.builds.build_once")
    response = service.post("/v1/runtimes", json={"language": "python", "packages": {"six": "1.14.0"}})
    _until_done(service, response.headers["location"])
    assert any(
        r.getMessage().startswith("built runtime ") and "(six==1.14.0) in " in r.getMessage() for r in caplog.records
    )


def test_live_log_is_shown_while_building(tmp_path: Path) -> None:
    """The tail of a build under way comes from its live log files (both streams)."""
    from evaluator_host.builds.build_once import tail

    (tmp_path / "a").write_text("Collecting six==1.16.0\n")
    (tmp_path / "b").write_text("WARNING: slow index\n")
    assert tail([tmp_path / "a", tmp_path / "b", tmp_path / "missing"]) == (
        "Collecting six==1.16.0\nWARNING: slow index\n"
    )


@pytest.mark.network
def test_a_workspace_lists_its_own_runtimes_and_reads_any_by_id(tmp_path: Path) -> None:
    """Runtimes are a shared cache: any key reads one by id, a workspace's key lists only those it asked
    for or its live evaluators run on, the operator's lists every one."""
    admin = {"Authorization": "Bearer operator-key-for-tests"}
    settings = make_settings(tmp_path, backend="process", admin_key="operator-key-for-tests")
    with TestClient(create_app(settings)) as client:
        keys = []
        for name in ("a", "b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=admin).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=admin).json()["key"]
            keys.append({"Authorization": f"Bearer {key}"})
        ha, hb = keys
        pins = {"language": "python", "packages": {"six": "1.16.0"}}
        made = client.post("/v1/runtimes", json=pins, headers=ha)
        assert made.status_code == 202, made.text
        view = _until_done(client, made.headers["location"], ha)
        rid = view["id"]

        def listed(headers: dict[str, str]) -> list[str]:
            return [r["id"] for r in client.get("/v1/runtimes", headers=headers).json()["data"]]

        assert listed(ha) == [rid] and listed(admin) == [rid]
        assert listed(hb) == []  # B cannot enumerate what A uses
        assert client.get(f"/v1/runtimes/{rid}", headers=hb).json()["status"] == "ready"  # by id: shared
        body = {"name": "e", "language": "python", "code": CODE, "packages": {"six": "1.16.0"}}
        evaluator = client.post("/v1/evaluators", json=body, headers=hb)
        assert evaluator.status_code == 201 and evaluator.json()["runtime_id"] == rid
        assert "x-runtime-build" not in evaluator.headers  # A's build served B
        assert listed(hb) == [rid]  # its evaluator runs on it
        assert client.delete(f"/v1/evaluators/{evaluator.json()['id']}", headers=hb).status_code == 204
        assert listed(hb) == []
        again = client.post("/v1/runtimes", json=pins, headers=hb)
        assert again.status_code == 200 and listed(hb) == [rid]  # asked for: listed from then on
