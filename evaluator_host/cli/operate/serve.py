"""``evaluator-host serve``: start the HTTP service (127.0.0.1 by default; a non-loopback address needs API
keys or ``--insecure``). Every refusal before the service starts — a non-loopback bind without keys, a queue
without its key, a port in use, a data dir another service holds, a database that cannot be used, a
component that refuses to start — is one line on stderr and exit 2, never a traceback.

Imported only when ``serve`` runs (``cli/main.py`` names :func:`run_serve` lazily): uvicorn and the app load
here, not for the rest of the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from evaluator_host.cli.lazy import collector_paused
from evaluator_host.errors import DataDirInUse, EvaluatorHostError
from evaluator_host.settings import Settings

__all__ = ["run_serve"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``serve`` cannot bind ``host:port`` when the address is taken (said before anything starts,
    where uvicorn would only log ``[Errno 98]``); None when it is free (or fails otherwise: uvicorn
    reports that)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return None
            return (
                f"port {port} on {host} is in use (another evaluator-host, or another program): choose another "
                f"with --port, EVALUATOR_HOST_PORT=, or PORT= for make run (e.g. make run PORT={port + 1})"
            )
    return None


def run_serve(args: argparse.Namespace) -> int:
    with collector_paused():  # the service's modules: an import makes no garbage (cli/lazy.py)
        import uvicorn

        from evaluator_host.api import create_app
        from evaluator_host.services import lock_data_dir

    overrides: dict[str, Any] = {}
    if args.backend:
        overrides["backend"] = args.backend
    if args.host:
        overrides["host"] = args.host  # the service answers to the address it binds (api/hosts.py)
    settings = Settings(**overrides)
    host = settings.host
    port = args.port or settings.port
    if not _is_loopback(host) and not settings.api_keys and not settings.admin_key and not args.insecure:
        sys.stderr.write(
            f"refusing to bind {host} without EVALUATOR_HOST_API_KEYS or EVALUATOR_HOST_ADMIN_KEY; "
            "pass --insecure to allow it\n"
        )
        return 2
    if settings.queue_url and not settings.secrets_key:
        from evaluator_host.jobs.queue.signing import QueueKeyMissing, task_keys

        try:
            task_keys(settings)
        except QueueKeyMissing as exc:
            sys.stderr.write(f"evaluator-host: {exc}\n")
            return 2
    if (busy := _port_in_use(host, port)) is not None:
        sys.stderr.write(f"evaluator-host: {busy}\n")
        return 2
    try:  # a clear refusal up front; the service takes the lock for good when it starts
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(lock_data_dir(settings.data_dir))
    except DataDirInUse as exc:
        sys.stderr.write(f"evaluator-host: {exc.message}\n")
        return 2
    from evaluator_host.observability.logs import configure

    level = args.log_level or settings.log_level
    configure(level, settings.log_format, settings.access_log)
    with collector_paused():  # the schema's migrations (modules loaded) and the app's routes: no garbage either
        from evaluator_host.cli.operate.db import check_database

        if (problem := check_database(settings)) is not None:  # migrated now (logged), or a clear refusal
            sys.stderr.write(f"evaluator-host: {problem}\n")
            return 2
        app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=level,
        access_log=False,
        log_config=None,
        timeout_keep_alive=settings.keep_alive_s,  # uvicorn's 5 s equals httpx's pool expiry: a race (Settings)
    )
    # the loop uvicorn.run would choose (``loop="auto"``: uvloop where installed, as the lock has it); a plain
    # asyncio.run here ran the service on asyncio's pure-Python loop: +0.2 ms a call by id, ~1.7x the egress
    # proxy's CPU per connection (issue 55, docs/benchmarks.md)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        return runner.run(_run_server(app, uvicorn.Server(config)))


async def _run_server(app: Any, server: Any) -> int:
    """Start the app's components (its lifespan's start, run here before uvicorn's: a refusal to start — an
    ``EvaluatorHostError`` such as a sandbox uid that cannot read the interpreter, or a malformed
    ``EVALUATOR_HOST_NETWORK_ALLOW`` — is its message alone on stderr and exit 2, not a traceback in the
    server's log), then serve until a signal. uvicorn runs the lifespan's end (the components stop before
    it re-raises the signal it caught); if it never got that far, they stop here."""
    started = app.router.lifespan_context(app)
    try:
        await started.__aenter__()
    except EvaluatorHostError as exc:
        sys.stderr.write(f"evaluator-host: {exc.message}\n")
        return 2
    stopped = False

    @contextlib.asynccontextmanager
    async def already_started(_app: Any) -> AsyncIterator[None]:
        nonlocal stopped
        try:
            yield
        finally:
            stopped = True
            await started.__aexit__(None, None, None)

    app.router.lifespan_context = already_started
    try:
        await server.serve()
    finally:
        if not stopped:
            await started.__aexit__(None, None, None)
    return 0 if server.started else 1
