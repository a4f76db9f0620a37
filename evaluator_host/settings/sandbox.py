"""The sandbox's and the builds' settings: isolation, the docker backend's images and containers, egress and
package builds.

Fields only: :class:`~evaluator_host.settings.Settings` is made of this class, which reads the environment;
its validators check these fields too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode

__all__ = ["SandboxSettings", "default_ca_bundle"]


def default_ca_bundle() -> Path | None:
    """The host's system CA bundle (Debian/Ubuntu, then Fedora/RHEL paths), if any."""
    for candidate in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"):
        if os.path.isfile(candidate):
            return Path(candidate)
    return None


def _default_python() -> str:
    # The interpreter that runs user code: the real binary behind this venv's python,
    # started with -I -S so no host site-packages leak into the sandbox.
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


class SandboxSettings(BaseModel):
    """The sandbox and build fields of :class:`~evaluator_host.settings.Settings`."""

    python_executable: str = Field(default_factory=_default_python, description="Interpreter for user code.")
    sandbox_uid_base: int = Field(200_000, description="First uid for sandboxed workers (when root).")
    process_isolation: Literal["auto", "rlimits"] = Field(
        "auto",
        description="The process backend's isolation: auto (the strongest this machine allows) or rlimits (no "
        "namespaces, as when unshare is missing or refused). As root, rlimits still runs user code under an "
        "unprivileged uid, or the service refuses to start (docs/security.md).",
    )
    pids_max: int = Field(64, description="Processes a worker may have (pids cgroup / RLIMIT_NPROC).")
    tmpfs_mb: int = Field(64, description="Size of each worker's private /tmp.")
    build_timeout_s: float = Field(300.0, gt=0, description="Longest a package install may take (then it fails).")
    build_max_disk_mb: int = Field(
        8192,
        ge=1,
        description="Disk one package build may write: its runtime folder, scratch and output (a docker build "
        "box's writable layer), no single file larger; past it the build is stopped and fails, nothing of it kept. "
        "Not counted: what a wheels-only build adds to the shared package store.",
    )
    allow_sdist_builds: bool = Field(
        True,
        description="Let pip build packages published only as source (an sdist's build runs the package's own "
        "code, in the build sandbox: unprivileged, no host data, network only to the package indexes); off: "
        "wheels only. Always off on a process backend without namespaces (no build sandbox there).",
    )
    docker_runtime_store: bool = Field(
        True,
        description="Docker: a Python set's runtime is a folder of hard links into the package store (built in the "
        "host's build sandbox, as the process backend's, bytecode included), bound read-only into workers started "
        "from the base image; off, or on a host without namespaces, or whose Python's minor version or C library "
        "does not fit the base image's: one committed image per set (docs/architecture.md, 28).",
    )
    build_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated hosts (host or host:port) a build may reach besides the configured package "
        "indexes, and that a direct-URL requirement (name @ https://host/...) may name; default none: such "
        "requirements are refused.",
    )
    max_concurrent_builds: int = Field(
        2, ge=1, description="Package installs running at once; later ones queue (on threads of their own)."
    )
    max_builds_per_workspace: int = Field(
        1,
        ge=1,
        description="A workspace's fair share of the build threads: a freed thread goes to a waiting workspace "
        "running fewer builds than this before another's next one (one workspace alone still uses every thread).",
    )
    ca_bundle: Path | None = Field(
        default_factory=default_ca_bundle,
        description="CA bundle given to package installs in build containers (TLS-intercepting proxies); also "
        "what the egress proxy verifies destinations with when it sets headers (network entries with headers), "
        "and the system part of the bundle egress workers trust.",
    )
    network_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated 'host:port' entries evaluators of the default workspace may declare in "
        "`network`: on a service without keys its allowlist (the only one it has); on a keyed service the "
        "default workspace's starting list, written when its stored list is empty (the operator's PATCH "
        "replaces it). Names in EGRESS_HOSTS resolve as they do for every workspace.",
    )
    egress_hosts: dict[str, str] = Field(
        default_factory=dict,
        description='Names the egress proxy resolves to a fixed address, as JSON {"name": "ip"}: trusted '
        "as given (not checked against private ranges) — for an internal API on purpose, and for tests.",
    )
    docker_host: str | None = Field(None, description="Docker engine URL; default: DOCKER_HOST or the local socket.")
    base_image: str = Field("evaluator-host/base-python:latest", description="Image runtimes are built FROM.")
    cpus: float = Field(1.0, gt=0, description="CPU quota of each worker (a container, or a cpu cgroup).")
    spare_workers: int = Field(
        1, ge=0, description="Unbound workers kept started per runtime in recent use (every backend; 0: none)."
    )
    spare_build_box_after_s: float = Field(
        10.0,
        ge=0,
        le=86400,
        description="Docker backend: seconds into the service's life its first spare build box starts (one "
        "started ahead, so a new package set's build skips a container start; right after a first build if "
        "that comes sooner; 0: at start). Start-up keeps the machine for what requests wait for.",
    )
    container_user: str = Field("65534:65534", description="uid:gid that user code runs as in containers.")
    container_labels: dict[str, str] = Field(
        default_factory=dict,
        description='Extra labels on every container the docker backend starts, as JSON {"name": "value"} (for '
        "the operator's tooling; the service's own evaluator-host.* labels cannot be overridden).",
    )
