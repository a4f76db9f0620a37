"""A process worker's raw pipe (``sandbox/process/raw_pipe.py``): what :meth:`RawPipe.behind` promises, and
its read end closed exactly once.

The process backend orders raw output and replies without sync marks: once a reply is read, the raw
output written before it is either handed to the sink already or still in the pipe, and ``behind``
waits for exactly those bytes. Proven here on a real pipe, with the writes made while the event loop
cannot run (so they are certainly unread when ``behind`` looks), on asyncio's loop and on uvloop (the
service's).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from evaluator_host.sandbox.process.raw_pipe import RawPipe
from tests.support.wait import wait_until_async

LOOPS = pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
Run = Callable[[Coroutine[Any, Any, None]], None]


def _started() -> tuple[RawPipe, bytearray]:
    """A new pipe read into a buffer (call on the running loop)."""
    pipe, got = RawPipe.create(), bytearray()
    pipe.start(got.extend)
    return pipe, got


@LOOPS
def test_behind_is_none_when_everything_written_was_taken_in(run: Run) -> None:
    async def main() -> None:
        pipe, got = _started()
        try:
            assert pipe.behind() is None  # nothing written
            os.write(pipe.write_end, b"abc")
            await wait_until_async(lambda: bool(got), 5, 0.01, what="the bytes read")
            assert got == b"abc"
            assert pipe.behind() is None  # read and handed over in the loop's read callback itself
        finally:
            pipe.close()

    run(main())


@LOOPS
def test_behind_waits_for_the_bytes_unread_when_it_looked_and_no_more(run: Run) -> None:
    async def main() -> None:
        pipe, got = _started()
        try:
            os.write(pipe.write_end, b"before the reply\n")  # the loop has not run since: certainly unread
            behind = pipe.behind()
            assert behind is not None and got == b""
            os.write(pipe.write_end, b"after it\n")  # written after the look: not waited for (a stray cannot hold us)
            await asyncio.wait_for(behind, 5)
            assert got.startswith(b"before the reply\n")
            assert pipe.received >= len(b"before the reply\n")
        finally:
            pipe.close()

    run(main())


@LOOPS
def test_a_pipe_whose_writers_are_gone_is_waited_for_no_more(run: Run) -> None:
    async def main() -> None:
        pipe, got = _started()
        os.write(pipe.write_end, b"last words")
        behind = pipe.behind()
        assert behind is not None
        pipe.close_write_end()  # every writer gone: the bytes, then the end
        await asyncio.wait_for(behind, 5)
        await asyncio.wait_for(pipe.closed.wait(), 5)
        assert got == b"last words"
        assert pipe.behind() is None

    run(main())


@LOOPS
def test_a_closed_pipe_is_not_looked_at_and_its_waiters_are_released(run: Run) -> None:
    # the worker's end: once closed, its descriptor's number may belong to another file
    async def main() -> None:
        pipe = RawPipe.create()
        pipe.start(lambda _data: None)
        os.write(pipe.write_end, b"unread")
        behind = pipe.behind()
        assert behind is not None
        pipe.close()
        await asyncio.wait_for(behind, 5)
        assert pipe.behind() is None

    run(main())


@LOOPS
def test_the_read_end_is_closed_exactly_once(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # a second close of a descriptor number another thread got meanwhile would close that thread's file
    closed: list[int] = []
    real_close = os.close

    def counting_close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    async def main() -> None:
        for end in ("eof", "close"):
            pipe = RawPipe.create()
            read_fd = pipe._read  # noqa: SLF001 - the descriptor whose closes are counted
            pipe.start(lambda _data: None)
            monkeypatch.setattr(os, "close", counting_close)
            if end == "eof":
                pipe.close_write_end()
                await asyncio.wait_for(pipe.closed.wait(), 5)
            pipe.close()
            pipe.close()
            await asyncio.sleep(0.05)  # whatever a loop might close later
            monkeypatch.setattr(os, "close", real_close)
            assert closed.count(read_fd) == 1, (end, closed)  # type: ignore[arg-type]
            closed.clear()

    run(main())
