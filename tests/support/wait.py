"""Waiting for a condition instead of sleeping for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 120, every_s: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy (returned), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)
