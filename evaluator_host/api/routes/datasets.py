"""``/v1/datasets``: upload a JSONL, CSV or JSON-array dataset (raw body or multipart file)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from starlette.datastructures import UploadFile

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.paging import MAX_LIMIT, window
from evaluator_host.errors import DatasetError, ErrorBody
from evaluator_host.jobs.datasets.uploads import to_model
from evaluator_host.jobs.models import Dataset, DatasetList, DatasetRow, DatasetRowPage

router = APIRouter(prefix="/datasets", tags=["datasets"])

_BODY = {
    "requestBody": {
        "description": "The rows: JSON lines, CSV with a header, or a JSON array of objects; raw, or as the "
        "multipart field `file` (optional fields `name`, `format`).",
        "content": {
            "application/jsonl": {"schema": {"type": "string"}},
            "text/csv": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {"file": {"type": "string", "format": "binary"}, "name": {"type": "string"}},
                    "required": ["file"],
                }
            },
        },
    }
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Dataset, openapi_extra=_BODY)
async def upload(
    request: Request,
    services: ServicesDep,
    workspace: WorkspaceDep,
    name: str | None = Query(None, max_length=200, description="Dataset name (default: the file's name)."),
    format: str | None = Query(None, description="jsonl | csv | json (default: from the file name or content type)."),
) -> Dataset:
    """Store a dataset; 422 names the first line (or element) that is not a valid row."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        async with request.form(max_files=1, max_fields=10) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise DatasetError("a multipart upload needs the dataset in a field named 'file'")
            field_name, field_format = form.get("name"), form.get("format")
            record = await services.datasets.upload_file(
                workspace,
                upload.file,
                filename=upload.filename,
                name=name or (field_name if isinstance(field_name, str) else None),
                fmt=format or (field_format if isinstance(field_format, str) else None),
                content_type=upload.content_type,
            )
    else:
        record = await services.datasets.upload_stream(
            workspace, request.stream(), name=name, fmt=format, content_type=content_type
        )
    return to_model(record)


@router.get("", response_model=DatasetList)
async def list_datasets(
    services: ServicesDep,
    workspace: WorkspaceDep,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> DatasetList:
    """Uploaded datasets, newest first (paged with ``limit`` and ``cursor``)."""
    asked = window(limit, cursor)  # a page is read from the database, never every dataset
    found = await services.datasets.list_all(workspace, limit=asked.fetch, before=asked.created_before())
    data, after = asked.answer([to_model(r) for r in found], lambda d: (d.created_at.isoformat(), d.id))
    return DatasetList(data=data, count=len(data), next_cursor=after)


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={409: {"model": ErrorBody, "description": "Conflict: jobs refer to the dataset (delete them first)."}},
)
async def delete(dataset_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Delete a dataset and its files; 409 while jobs run on it (delete those first)."""
    await services.datasets.delete(workspace, dataset_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{dataset_id}", response_model=Dataset)
async def get(dataset_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Dataset:
    """One dataset's metadata."""
    return to_model(await services.datasets.get(workspace, dataset_id))


@router.get("/{dataset_id}/rows", response_model=DatasetRowPage)
async def rows(
    dataset_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    offset: int = Query(0, ge=0, le=2**53, description="First row index."),
    limit: int = Query(20, ge=1, le=1000),
) -> DatasetRowPage:
    """Stored rows from ``offset`` (at most ``limit``), in upload order: a preview to map columns from."""
    record = await services.datasets.get(workspace, dataset_id)  # 404 for another workspace's
    found = await services.datasets.rows(workspace, record.id, offset, limit)
    after = offset + len(found)
    return DatasetRowPage(
        data=[DatasetRow(index=i, row=r) for i, r in found],
        offset=offset,
        limit=limit,
        next_offset=after if after < record.row_count else None,
        total=record.row_count,
    )
