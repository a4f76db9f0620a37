"""Where ``evaluator-host run FILE --data ROWS`` sends its batch job: a running service, or this process.

:class:`Target` is the handful of steps the batch command takes (upsert the evaluator, upload the
dataset, start, follow, read and cancel the job, evaluate a few rows by id); :class:`Remote` takes
them over HTTP (``--server URL``), :class:`Local` on the service's components in this process (the
same service methods and use cases the routes call), on a private scratch data dir.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["Local", "RefusedError", "Remote", "Target"]


class RefusedError(Exception):
    """The service refused the evaluator, the dataset or the job (HTTP 4xx / DefinitionError); ``error``:
    the answer's error object when it had one (``type``, ``message``, ``line``, ``column``)."""

    def __init__(self, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error = error or {}


class Target(Protocol):
    """The steps of a batch run, wherever it runs."""

    async def upsert(self, definition: dict[str, Any]) -> dict[str, Any]: ...
    async def upload(self, path: Path) -> dict[str, Any]: ...
    async def start(self, body: dict[str, Any]) -> dict[str, Any]: ...
    async def job(self, job_id: str) -> dict[str, Any]: ...
    async def cancel(self, job_id: str) -> dict[str, Any]: ...
    def results(self, job_id: str) -> AsyncIterator[bytes]: ...
    async def page(self, job_id: str, limit: int) -> list[dict[str, Any]]: ...
    async def evaluate(self, evaluator_id: str, revision: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


def _unchanged(found: dict[str, Any], definition: dict[str, Any]) -> bool:
    """Whether the stored evaluator's latest revision already is ``definition`` (pins and settings normalized)."""
    from evaluator_host.definitions.packages import normalize_pins
    from evaluator_host.evaluation.models import EvaluatorSettings

    language = definition["language"]
    return bool(
        found["language"] == language
        and found["code"] == definition["code"]
        and found["packages"] == normalize_pins(language, definition.get("packages"))
        and found["settings"] == EvaluatorSettings(**(definition.get("settings") or {})).model_dump()
    )


class Remote:
    """A running service, over HTTP."""

    def __init__(self, url: str, api_key: str | None) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(
            base_url=url.rstrip("/"), headers=headers, timeout=httpx.Timeout(600, connect=10)
        )

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self.client.request(method, path, **kwargs)
        if 400 <= response.status_code < 500:
            error: dict[str, Any] | None = None
            try:
                error = response.json()["error"]
                message = f"{error['type']}: {error['message']}"
            except (ValueError, KeyError, TypeError):
                error, message = None, response.text
            raise RefusedError(f"{method} {path} answered {response.status_code}: {message}", error)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    async def upsert(self, definition: dict[str, Any]) -> dict[str, Any]:
        listing = await self._json("GET", "/v1/evaluators")
        found: dict[str, Any] | None = next((e for e in listing["data"] if e["name"] == definition["name"]), None)
        if found is None:
            return await self._json("POST", "/v1/evaluators", json=definition)
        if _unchanged(found, definition):
            return found
        return await self._json("PUT", f"/v1/evaluators/{found['id']}", json=definition)

    async def upload(self, path: Path) -> dict[str, Any]:
        with path.open("rb") as fh:
            files = {"file": (path.name, fh, "application/octet-stream")}
            return await self._json("POST", "/v1/datasets", files=files)

    async def start(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._json("POST", "/v1/jobs", json=body)

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/jobs/{job_id}")

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return await self._json("POST", f"/v1/jobs/{job_id}/cancel")

    async def results(self, job_id: str) -> AsyncIterator[bytes]:
        async with self.client.stream("GET", f"/v1/jobs/{job_id}/results", params={"format": "ndjson"}) as response:
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                yield chunk

    async def page(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        body = await self._json("GET", f"/v1/jobs/{job_id}/results", params={"limit": limit})
        data: list[dict[str, Any]] = body["data"]
        return data

    async def evaluate(self, evaluator_id: str, revision: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = await self._json(
            "POST", f"/v1/evaluators/{evaluator_id}/evaluate", json={"revision": revision, "cases": cases}
        )
        results: list[dict[str, Any]] = body["results"]
        return results

    async def close(self) -> None:
        await self.client.aclose()


_WS = DEFAULT_WORKSPACE  # an in-process run has a scratch database of its own: the default workspace


class Local:
    """The service's components in this process (no server)."""

    def __init__(self) -> None:
        from evaluator_host.services import Services
        from evaluator_host.settings import Settings

        self.services = Services.start_private(Settings())

    async def upsert(self, definition: dict[str, Any]) -> dict[str, Any]:
        from evaluator_host.evaluation.models import EvaluatorCreate

        body = EvaluatorCreate.model_validate(definition)
        evaluators = self.services.evaluators
        found = next((e.model_dump(mode="json") for e in await evaluators.list_all(_WS) if e.name == body.name), None)
        if found is None:
            return (await evaluators.create(_WS, body)).model_dump(mode="json")
        if _unchanged(found, definition):
            return found
        return (await evaluators.update(_WS, found["id"], body)).model_dump(mode="json")

    async def upload(self, path: Path) -> dict[str, Any]:
        from evaluator_host.jobs.uploads import to_model

        with path.open("rb") as fh:
            record = await self.services.datasets.upload_file(
                _WS, fh, filename=path.name, name=None, fmt=None, content_type=None
            )
        return to_model(record).model_dump(mode="json")

    async def start(self, body: dict[str, Any]) -> dict[str, Any]:
        from evaluator_host.jobs.models import JobCreate

        return (await self.services.runner.create(_WS, JobCreate.model_validate(body))).model_dump(mode="json")

    async def job(self, job_id: str) -> dict[str, Any]:
        return (await self.services.runner.get(_WS, job_id)).model_dump(mode="json")

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return (await self.services.runner.cancel(_WS, job_id)).model_dump(mode="json")

    async def results(self, job_id: str) -> AsyncIterator[bytes]:
        job, revision = await self.services.runner.job_and_revision(_WS, job_id)
        stream = self.services.results.ndjson(job, revision)
        while (chunk := await asyncio.to_thread(next, stream, None)) is not None:
            yield chunk

    async def page(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        job, revision = await self.services.runner.job_and_revision(_WS, job_id)
        page = await asyncio.to_thread(self.services.results.page, job, revision, 0, limit)
        return [item.model_dump(mode="json") for item in page.data]

    async def evaluate(self, evaluator_id: str, revision: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from evaluator_host.evaluation.models import Case
        from evaluator_host.evaluation.usecases import evaluate_stored

        parsed = [Case.model_validate(c) for c in cases]
        evaluated = await evaluate_stored(self.services, _WS, evaluator_id, revision, parsed)  # as the route does
        return [r.model_dump(mode="json") for r in evaluated.results]

    async def close(self) -> None:
        await self.services.close()
