"""A module's slow cases run at once: each waits out a clock the product keeps (a budget's minute), so
they wait it out together instead of one after another.

A test whose time is mostly such a wait names a *scenario* (a function of a fresh directory and the
test's parameters, its assertions inside); a module fixture calls :func:`at_once` with the scenarios
of its tests, which starts every selected case's scenario on a thread of its own (each its own
services, judge and data dir, as before) and the test takes its own outcome: what its scenario
returned, or its failure re-raised (its own traceback). Each case keeps its test id, its parameters,
its skips (a case a mark skips is not started) and its assertions; only the waiting overlaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Cases", "at_once"]

Scenario = Callable[..., Any]


class Cases:
    """The started scenarios of a module, by (test name, parameters); a test whose scenario was not started
    (a worker that does not run whole modules) runs it when it asks for its outcome."""

    def __init__(
        self, futures: dict[tuple[str, str], Future[Any]], scenarios: dict[str, Scenario], tmp: pytest.TempPathFactory
    ) -> None:
        self._futures = futures
        self._scenarios = scenarios
        self._tmp = tmp

    def outcome(self, request: pytest.FixtureRequest) -> Any:
        """What the scenario of ``request``'s test returned (its exception raised here if it failed)."""
        key = _key(request.node)
        if key not in self._futures:  # not started at once: run now, on this test's thread
            return self._scenarios[key[0]](_directory(self._tmp, key), **_params(request.node))
        return self._futures[key].result()


def _key(item: pytest.Item) -> tuple[str, str]:
    callspec = getattr(item, "callspec", None)
    return getattr(item, "originalname", item.name), callspec.id if callspec is not None else ""


def _directory(tmp: pytest.TempPathFactory, key: tuple[str, str]) -> Path:
    name, case = key
    return tmp.mktemp(f"{name[5:35]}-{case}" if case else name[5:35])


def _grouped(config: pytest.Config) -> bool:
    """Whether this process runs whole modules (no xdist, or xdist's ``loadfile``/``loadscope``): only then
    are the module's selected tests all this worker's to start (with ``load``, every worker collects every
    test and runs some)."""
    try:
        dist = config.getoption("dist")
    except ValueError:  # no xdist
        return True
    return dist in ("no", "loadfile", "loadscope")


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def _skipped(item: pytest.Item) -> bool:
    """Whether a mark skips ``item`` whatever happens (``skip``, or ``skipif`` on a condition already decided)."""
    if item.get_closest_marker("skip") is not None:
        return True
    for mark in item.iter_markers("skipif"):
        conditions = list(mark.args) or [mark.kwargs.get("condition", False)]
        if any(c is True for c in conditions):
            return True
    return False


@contextmanager
def at_once(
    request: pytest.FixtureRequest,
    scenarios: dict[str, Scenario],
    tmp: pytest.TempPathFactory,
    skip: Callable[[dict[str, Any]], bool] = lambda _params: False,
) -> Iterator[Cases]:
    """Start, each on its own thread, the scenario of every test of ``request``'s module selected in this
    session and named in ``scenarios`` (by its test's name), called as ``scenario(path, **params)`` with a
    fresh directory, except those a mark skips (``skip``, ``skipif`` on a condition already decided as a
    bool) or ``skip(params)`` says the test skips — a skip decided otherwise may find its scenario started
    (work wasted, never a result changed); until the module ends (then every one has finished). Where this
    process does not run whole modules (:func:`_grouped`), nothing is started at once: each test runs its
    own scenario when it asks (:meth:`Cases.outcome`)."""
    chosen = [
        item
        for item in (request.session.items if _grouped(request.config) else [])
        if getattr(item, "module", None) is request.module
        and _key(item)[0] in scenarios
        and not _skipped(item)
        and not skip(_params(item))
    ]
    with ThreadPoolExecutor(max_workers=max(1, len(chosen)), thread_name_prefix="at-once") as pool:
        futures: dict[tuple[str, str], Future[Any]] = {}
        for item in chosen:
            key = _key(item)
            futures[key] = pool.submit(scenarios[key[0]], _directory(tmp, key), **_params(item))
        yield Cases(futures, scenarios, tmp)
