"""Where ``evaluator-host run FILE --data ROWS`` sends its batch job: a running service, or this process.

:class:`Target` is the handful of steps the batch command takes (upsert the evaluator, upload the
dataset, start, follow, read and cancel the job, evaluate a few rows by id); :class:`Remote` takes
them through the Python client (``--server URL``), :class:`Local` on the service's components in this
process (the same service methods and use cases the routes call), on a private scratch data dir.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from evaluator_host.cli.remote import described, dumped
from evaluator_host.client import ApiError, AsyncClient
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

if TYPE_CHECKING:
    from evaluator_host.cli.evaluate.judge import Judge
    from evaluator_host.services import Services

__all__ = ["Local", "RefusedError", "Remote", "Target"]

T = TypeVar("T")


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
        and found.get("secrets", []) == list(definition.get("secrets") or [])
        and found.get("network", []) == list(definition.get("network") or [])
    )


class Remote:
    """A running service, through the asyncio client (``evaluator_host.client``): a 4xx answer is a
    :class:`RefusedError` (``METHOD PATH answered STATUS: TYPE: MESSAGE``); a 5xx or no answer stays
    the client's error."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.client = AsyncClient(url, api_key or "", timeout_s=600)

    @staticmethod
    async def _refused(call: Awaitable[T]) -> T:
        try:
            return await call
        except ApiError as exc:
            if exc.status >= 500:
                raise
            raise RefusedError(described(exc), exc.detail.model_dump()) from exc

    async def upsert(self, definition: dict[str, Any]) -> dict[str, Any]:
        listing = await self._refused(self.client.list_evaluators())
        found = next((dumped(e) for e in listing.data if e.name == definition["name"]), None)
        if found is None:
            return dumped(await self._refused(self.client.create_evaluator(**definition)))
        if _unchanged(found, definition):
            return found
        return dumped(await self._refused(self.client.replace_evaluator(found["id"], **definition)))

    async def upload(self, path: Path) -> dict[str, Any]:
        return dumped(await self._refused(self.client.upload_dataset(path)))

    async def start(self, body: dict[str, Any]) -> dict[str, Any]:
        return dumped(await self._refused(self.client.start_job(**body)))

    async def job(self, job_id: str) -> dict[str, Any]:
        return dumped(await self._refused(self.client.get_job(job_id)))

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return dumped(await self._refused(self.client.cancel_job(job_id)))

    async def results(self, job_id: str) -> AsyncIterator[bytes]:
        async for chunk in self.client.export_results(job_id, "ndjson"):
            yield chunk

    async def page(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        page = await self._refused(self.client.job_results(job_id, limit=limit))
        return [dumped(item) for item in page.data]

    async def evaluate(self, evaluator_id: str, revision: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        batch = await self._refused(self.client.evaluate_cases_by_id(evaluator_id, cases, revision=revision))
        return [dumped(r) for r in batch.results]

    async def close(self) -> None:
        await self.client.close()


_WS = DEFAULT_WORKSPACE  # an in-process run has a scratch database of its own: the default workspace


class Local:
    """The service's components in this process (no server)."""

    def __init__(self, services: Services | None = None) -> None:
        if services is None:
            from evaluator_host.services import Services
            from evaluator_host.settings import Settings

            services = Services.start_private(Settings())
        self.services = services

    @classmethod
    async def for_judge(cls, judge: Judge) -> Local:
        """In this process, ready for ``judge`` (its hosts allowed, its secrets put: ``cli/evaluate/judge.py``)."""
        from evaluator_host.cli.evaluate.judge import start_private

        return cls(await start_private(judge))

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
        from evaluator_host.jobs.datasets.uploads import to_model

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
