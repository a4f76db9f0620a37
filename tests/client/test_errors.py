"""The service's error answers as the client's exception tree, against the real service (keys on)."""

from __future__ import annotations

import pytest

from evaluator_host.client import (
    ApiError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ClientError,
    ConflictError,
    JobWaitTimeout,
    NotFoundError,
    PermissionDenied,
    ServiceUnreachable,
    UnprocessableError,
)
from tests.support.aio import aio
from tests.support.client import Live

SLOW = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.5)\n    return 1.0\n"


def test_a_missing_resource_is_not_found_with_the_service_s_type_and_message(api: Client) -> None:
    with pytest.raises(NotFoundError) as caught:
        api.get_evaluator("ev_missing")
    error = caught.value
    assert isinstance(error, ApiError) and isinstance(error, ClientError)
    assert (error.status, error.type) == (404, "NotFound") and error.detail.message == error.message
    assert "GET" in str(error) and "/v1/evaluators/ev_missing" in str(error) and "404" in str(error)


def test_a_definition_error_is_unprocessable_with_its_line_and_column(api: Client) -> None:
    with pytest.raises(UnprocessableError) as caught:
        api.evaluate("def evaluate(inputs, outputs, trace):\n    return (\n")
    assert (caught.value.status, caught.value.type) == (422, "SyntaxError") and caught.value.line is not None
    with pytest.raises(UnprocessableError) as bad_pin:
        api.create_evaluator("pins", "def evaluate(inputs, outputs, trace):\n    return 1\n", packages={"numpy": ">=1"})
    assert bad_pin.value.type == "PackageSpecError"
    with pytest.raises(UnprocessableError) as body:
        api.evaluate("def evaluate(inputs, outputs, trace):\n    return 1\n", settings={"timeout_s": 10_000})
    assert body.value.type == "ValidationError"


def test_no_key_is_an_authentication_error_and_a_workspace_key_may_not_use_operator_routes(live: Live) -> None:
    with Client(live.url, api_key="") as anonymous, pytest.raises(AuthenticationError) as caught:
        anonymous.list_evaluators()
    assert caught.value.status == 401
    with Client(live.url, "evh_not-a-key") as wrong, pytest.raises(AuthenticationError):
        wrong.list_jobs()
    with Client(live.url, live.key) as member, pytest.raises(PermissionDenied) as denied:
        member.list_workspaces()
    assert denied.value.status == 403


def test_a_conflict_and_a_bad_request_map_to_their_classes(api: Client) -> None:
    evaluator = api.create_evaluator("slow-conflict", SLOW)
    dataset = api.upload_dataset([{"outputs": i} for i in range(40)], name="conflict")
    job = api.start_job(evaluator.id, dataset_id=dataset.id, parallelism=1)
    with pytest.raises(ConflictError) as caught:
        api.delete_dataset(dataset.id)  # a job runs on it
    assert caught.value.status == 409
    with pytest.raises(JobWaitTimeout) as waited:
        api.wait_job(job, timeout_s=0.2, poll_s=0.1)  # 40 rows of 0.5 s on one worker cannot be done
    assert waited.value.job.id == job.id and waited.value.job.status in ("queued", "running")
    assert api.cancel_job(job.id).status == "cancelled"
    with pytest.raises(BadRequestError) as bad:
        api.get_trace("not-hex")
    assert bad.value.status == 400


def test_a_service_that_does_not_answer_is_named_by_its_url() -> None:
    url = "http://127.0.0.1:1"  # nothing listens there, ever (a free port could be the other worker's next)
    with Client(url, timeout_s=5) as nowhere, pytest.raises(ServiceUnreachable) as caught:
        nowhere.health()
    assert url in str(caught.value) and caught.value.url == url


@aio
async def test_the_async_client_raises_the_same_tree(live: Live) -> None:
    async with AsyncClient(live.url, live.key) as api:
        with pytest.raises(NotFoundError):
            await api.get_job("job_missing")
        with pytest.raises(UnprocessableError) as caught:
            await api.evaluate("def evaluate(inputs, outputs, trace):\n    return (\n")
        assert caught.value.type == "SyntaxError"
    async with AsyncClient(live.url, "") as anonymous:
        with pytest.raises(AuthenticationError):
            await anonymous.list_datasets()
    async with AsyncClient("http://127.0.0.1:1", timeout_s=5) as nowhere:  # nothing listens there, ever
        with pytest.raises(ServiceUnreachable):
            await nowhere.health()


def test_any_route_as_plain_json_and_the_cli_s_one_line_errors(live: Live, api: Client) -> None:
    from evaluator_host.cli.inputs import UsageError
    from evaluator_host.cli.remote import call_service

    listing = api.request("GET", "/v1/evaluators", limit=1)
    assert isinstance(listing, dict) and "data" in listing
    with pytest.raises(NotFoundError):
        api.request("get", "/v1/jobs/job_missing")
    assert call_service(live.url, live.key, "GET", "/v1/jobs", limit=1)["data"] is not None
    with pytest.raises(UsageError) as caught:
        call_service(live.url, live.key, "GET", "/v1/evaluators/ev_missing")
    assert str(caught.value).startswith("GET /v1/evaluators/ev_missing answered 404: NotFound: ")
    nowhere = "http://127.0.0.1:1"  # nothing listens there, ever
    with pytest.raises(UsageError, match=f"cannot reach the service at {nowhere}"):
        call_service(nowhere, None, "GET", "/healthz")


def test_a_service_that_accepts_but_never_answers_is_a_timeout_naming_the_url() -> None:
    import socket

    with socket.socket() as listener:  # accepts connections (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with Client(url, timeout_s=0.5) as silent, pytest.raises(ServiceUnreachable) as caught:
            silent.health()
    assert str(caught.value).startswith(f"the service at {url} did not answer in time")


def test_a_poll_longer_than_the_service_allows_is_capped_not_refused(api: Client) -> None:
    evaluator = api.create_evaluator("capped-poll", "def evaluate(inputs, outputs, trace):\n    return 1\n")
    job = api.wait_job(api.start_job(evaluator.id, rows=[{"outputs": 1}]), poll_s=600, timeout_s=120)
    assert job.status == "succeeded"  # wait_s=600 would be a 422: the client asks for 60 at most
