"""``evaluator-host jobs list|show [JOB_ID]``: batch jobs, through a running service — each job's status and
progress, and for a job with sinks (issue 52) each sink's deliveries: ``langfuse: 3 delivered, 1 skipped``.

Like ``rules`` (``cli/service/rules.py``) it talks to the service's HTTP API (``--server``, default ``http://HOST:PORT``
of the settings) with a workspace key (``--api-key``, default ``EVALUATOR_HOST_API_KEY``; none for an open
service). Output: a table, or one JSON object per line with ``--json``. A 4xx/5xx answer is an error message
and exit status 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.remote import dumped, service_client, usage_errors
from evaluator_host.cli.service.rules import API_KEY_ENV, _print

__all__ = ["add_parser", "sink_summary"]

_COLUMNS = ["id", "evaluator_id", "revision", "status", "done", "failed", "total", "created_at"]


def sink_summary(sinks: list[dict[str, Any]]) -> str | None:
    """A job's sinks in one cell: ``type[ name]: N delivered, N pending, N failed, N skipped`` (counts of 0 left
    out but for delivered), ``;`` between sinks; None without sinks."""
    parts = []
    for sink in sinks:
        counts = [f"{sink['delivered']} delivered"] + [
            f"{sink[k]} {k}" for k in ("pending", "failed", "skipped") if sink.get(k)
        ]
        label = sink["type"] + (f" {sink['name']}" if sink.get("name") else "")
        parts.append(f"{label}: {', '.join(counts)}")
    return "; ".join(parts) or None


def _row(job: dict[str, Any]) -> dict[str, Any]:
    progress = job.get("progress") or {}
    return {**job, **{k: progress.get(k) for k in ("done", "failed", "total")}, "sinks": sink_summary(job["sinks"])}


def _run(args: argparse.Namespace) -> int:
    if args.action == "show" and not args.target:
        raise UsageError("jobs show JOB_ID")
    with service_client(args.server, args.api_key or os.environ.get(API_KEY_ENV)) as client, usage_errors():
        if args.action == "list":
            jobs = [dumped(j) for j in client.list_jobs(limit=args.limit).data]
        else:
            jobs = [dumped(client.get_job(args.target))]
    if args.json:
        _print(args, jobs, [])
        return 0
    columns = [*_COLUMNS, "sinks"] if any(j["sinks"] for j in jobs) else _COLUMNS
    _print(args, [_row(j) for j in jobs], columns)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``jobs`` to the command line."""
    jobs = sub.add_parser("jobs", help="batch jobs: list, show JOB_ID (status, progress, each sink's deliveries)")
    jobs.add_argument("action", choices=["list", "show"])
    jobs.add_argument("target", nargs="?", help="show: the job id")
    jobs.add_argument("--limit", type=int, default=50, help="list: at most this many, newest first (default 50)")
    jobs.add_argument("--server", help="URL of the running service (default: http://HOST:PORT of the settings)")
    jobs.add_argument("--api-key", help=f"the workspace key (default: {API_KEY_ENV})")
    jobs.add_argument("--json", action="store_true", help="one JSON object per line")
    jobs.set_defaults(func=_run)
