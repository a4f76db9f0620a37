"""Pydantic models of the runtimes resource (``/v1/runtimes``): docs/api.md, "Runtimes"."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from evaluator_host.definitions import languages
from evaluator_host.definitions.models import Language, Packages
from evaluator_host.errors import ErrorDetail

__all__ = [
    "BuildProgress",
    "LockedPackage",
    "RuntimeCreate",
    "RuntimeList",
    "RuntimeLock",
    "RuntimeStatus",
    "RuntimeView",
]

_FAMILY = languages.get(languages.DEFAULT).family.name
RuntimeStatus = Literal["building", "ready", "failed"]

_LOCK: list[JsonValue] = [
    "numpy==1.26.4",
    "pandas==2.2.3",
    "python-dateutil==2.9.0.post0",
    "pytz==2024.2",
    "six==1.16.0",
]


class RuntimeCreate(BaseModel):
    """A package set to build ahead of the first evaluation that needs it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"language": languages.DEFAULT, "packages": {"pandas": "2.2.3"}}]},
    )

    language: Language
    packages: Packages = Field(description="Exact pins, as an evaluator's `packages` (at least one).")


class BuildProgress(BaseModel):
    """Where a build under way stands (Python sets; an npm build reports none)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"phase": "downloading", "done": 3, "total": 12}]})

    phase: Literal["waiting", "resolving", "downloading", "installing", "finishing"] = Field(
        description="waiting (for a build slot), resolving (the lock), downloading (the files the package store "
        "lacks), installing (unpacking and linking), finishing (making the runtime from the store)."
    )
    done: int = Field(0, description="downloading: the files fetched so far.")
    total: int = Field(0, description="downloading: the files the package store lacked (0: everything was there).")


class RuntimeView(BaseModel):
    """One runtime: a package set built (or being built, or that failed to build) for a language family."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": f"{_FAMILY}-5f0c2e8a9d1b3c4e7f60",
                    "status": "ready",
                    "language": _FAMILY,
                    "packages": {"pandas": "2.2.3"},
                    "lock": _LOCK,
                    "size_bytes": 182_000_000,
                    "created_at": "2026-11-22T12:00:10Z",
                    "last_used": "2026-11-22T12:05:00Z",
                    "build_seconds": 10.8,
                    "elapsed_s": None,
                    "progress": None,
                    "in_use": True,
                    "log_tail": "Successfully installed numpy-1.26.4 pandas-2.2.3 …",
                    "error": None,
                }
            ]
        }
    )

    id: str = Field(description="The runtime id every result's `runtime.id` names.")
    status: RuntimeStatus
    language: str = Field(description="The language family (JavaScript and TypeScript share `node` runtimes).")
    packages: dict[str, str] = Field(description="The pins.")
    lock: list[str] = Field(default_factory=list, description="Every resolved package and version (when ready).")
    hashes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Each `lock` line's archive hashes as the build recorded them (`sha256:<hex>` for Python, the "
        "installed wheel's first; npm's `integrity`, `sha512-<base64>`); empty for runtimes built before hashes were "
        "recorded.",
    )
    size_bytes: int | None = Field(None, description="On disk (process backend) or the image's size (docker).")
    created_at: datetime | None = None
    last_used: datetime | None = Field(None, description="When a worker last started on it (at most once a minute).")
    build_seconds: float | None = Field(None, description="How long its build took (ready or failed).")
    elapsed_s: float | None = Field(None, description="While building: seconds since the build started.")
    progress: BuildProgress | None = Field(None, description="While building: its phase (and files fetched).")
    in_use: bool = Field(False, description="Live workers run on it (a prune keeps it).")
    log_tail: str = Field("", description="The end of the build's log (live while building).")
    error: ErrorDetail | None = Field(None, description="Why the build failed (a BuildError).")


class RuntimeList(BaseModel):
    """Runtimes by id (paged with ``limit`` and ``cursor``, like every list)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"data": [], "count": 0, "next_cursor": None}]})

    data: list[RuntimeView]
    count: int
    next_cursor: str | None = None


class LockedPackage(BaseModel):
    """One installed package of a runtime's lock."""

    name: str
    version: str
    sha256: str | None = Field(
        None, description="The installed wheel's SHA-256 (hex) when the build recorded it (Python); null otherwise."
    )
    hashes: list[str] = Field(
        default_factory=list,
        description="Every recorded hash: `sha256:<hex>` of the version's files for this interpreter (the installed "
        "wheel's first) for Python, npm's `integrity` (`sha512-<base64>`) for Node; empty when none was recorded.",
    )


class RuntimeLock(BaseModel):
    """``GET /v1/runtimes/{id}/lock``: every package with its version (and hash), the interpreter, the base image."""

    runtime_id: str
    language: str
    interpreter: dict[str, str] = Field(description='{"name": "python" | "node", "version"}')
    base_image: str | None = Field(description="The base image's id (docker); null: the host's interpreter.")
    packages: list[LockedPackage]
