"""A test module's independent scenarios run at once, each still judged by its own test.

A fault scenario mostly waits (a service to start, a worker to be found frozen, a job to finish); run one
after another, a module's scenarios cost the sum of their waits. :class:`Ahead` starts every selected
scenario of a module in threads when the module's first test asks for them; each test then takes its
own scenario's outcome (:meth:`Ahead.outcome`): the scenario's checks run inside it, a failed check is
raised in that test with its traceback, and nothing of one scenario (service, data dir, containers) is
seen by another. Selecting one test (``-k``) runs only its scenario.

Contract: :meth:`Ahead.start` is called once per key; :meth:`Ahead.close` waits for every scenario
(also those whose test was never reached: an interrupted session) so that none outlives the module.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import pytest

__all__ = ["Ahead", "selected", "selected_params"]


def selected(request: pytest.FixtureRequest) -> list[pytest.Function]:
    """The module's selected tests that will run: a test a ``skipif(True)`` mark skips (no Docker engine)
    has no scenario to start."""
    return [
        item
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and not any(mark.args and mark.args[0] is True for mark in item.iter_markers("skipif"))
    ]


def selected_params(request: pytest.FixtureRequest, *names: str) -> list[tuple[Any, ...]]:
    """The parameters ``names`` of :func:`selected` tests (in collection order, no duplicates)."""
    found = {tuple(item.callspec.params[name] for name in names): None for item in selected(request)}
    return list(found)


class Ahead:
    """Scenarios running at once (at most ``at_once``), each known by its key."""

    def __init__(self, at_once: int, name: str = "scenario") -> None:
        self.running: dict[Hashable, Future[Any]] = {}
        self.pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix=name)

    def start(self, key: Hashable, scenario: Callable[..., Any], *args: Any) -> None:
        """Run ``scenario(*args)`` in a thread (queued while ``at_once`` others run)."""
        assert key not in self.running, f"scenario {key!r} started twice"
        self.running[key] = self.pool.submit(scenario, *args)

    def outcome(self, key: Hashable, timeout: float = 600.0) -> Any:
        """What ``key``'s scenario returned, once it has; what it raised is raised here (a failed check:
        this test fails with the scenario's traceback)."""
        assert key in self.running, f"no scenario {key!r} was started (is the test selected?)"
        return self.running[key].result(timeout=timeout)

    def close(self) -> None:
        for future in self.running.values():
            with suppress(BaseException):  # a scenario's failure belongs to its test, reported there
                future.result()
        self.pool.shutdown()
