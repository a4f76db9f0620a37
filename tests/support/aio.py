"""The one way to run an async test: ``@aio`` on an ``async def test_…`` runs it on a fresh event loop
(``asyncio.run``), failing it, not hanging the session, after ``TIMEOUT_S``.

(No pytest-asyncio: the suite's async tests are few and want nothing but a loop of their own each.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

TIMEOUT_S = 20.0


def aio(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run the async test ``fn`` on a fresh loop, failing (not hanging) after ``TIMEOUT_S`` s."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TIMEOUT_S))

    return wrapper
