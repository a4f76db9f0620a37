"""Stopping a background loop: :func:`stop` cancels an ``asyncio`` task and waits until it has ended.

Every long-lived loop of the service (routing, scoring, backfill planning, forwarding, sink delivery,
retention, assembly) is one task its owner starts and, on ``close``, stops with :func:`stop`. No I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["stop"]


async def stop(task: asyncio.Task[Any] | asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (None: nothing) and return once it has ended; its cancellation is not re-raised."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
