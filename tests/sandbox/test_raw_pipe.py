"""A process worker's raw pipe (``sandbox/process/raw_pipe.py``): what :meth:`RawPipe.behind` promises.

The process backend orders raw output and replies without sync marks: once a reply is read, the raw
output written before it is either handed to the sink already or still in the pipe, and ``behind``
waits for exactly those bytes. Proven here on a real pipe, with the writes made while the event loop
cannot run (so they are certainly unread when ``behind`` looks).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from evaluator_host.sandbox.process.raw_pipe import open_raw_pipe


def test_behind_is_none_when_everything_written_was_taken_in() -> None:
    async def main() -> None:
        read, write = os.pipe()
        got: list[bytes] = []
        transport, pipe = await open_raw_pipe(read, got.append)
        try:
            assert pipe.behind() is None  # nothing written
            os.write(write, b"abc")
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.01)
            assert b"".join(got) == b"abc"
            assert pipe.behind() is None  # read and handed over in the loop's read callback itself
        finally:
            os.close(write)
            transport.close()

    asyncio.run(main())


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])  # the service runs on uvloop
def test_behind_waits_for_the_bytes_unread_when_it_looked_and_no_more(run: Callable[[Any], None]) -> None:
    async def main() -> None:
        read, write = os.pipe()
        got: list[bytes] = []
        transport, pipe = await open_raw_pipe(read, got.append)
        try:
            os.write(write, b"before the reply\n")  # the loop has not run since: certainly unread
            behind = pipe.behind()
            assert behind is not None and got == []
            os.write(write, b"after it\n")  # written after the look: not waited for (a stray cannot hold us)
            await asyncio.wait_for(behind, 5)
            assert b"".join(got).startswith(b"before the reply\n")
            assert pipe.received >= len(b"before the reply\n")
        finally:
            os.close(write)
            transport.close()

    run(main())


def test_a_closed_pipe_is_waited_for_no_more() -> None:
    async def main() -> None:
        read, write = os.pipe()
        got: list[bytes] = []
        transport, pipe = await open_raw_pipe(read, got.append)
        os.write(write, b"last words")
        behind = pipe.behind()
        assert behind is not None
        os.close(write)  # every writer gone: the bytes, then the end
        await asyncio.wait_for(behind, 5)
        await asyncio.wait_for(pipe.closed.wait(), 5)
        assert b"".join(got) == b"last words"
        assert pipe.behind() is None
        transport.close()

    asyncio.run(main())


def test_a_pipe_being_closed_is_not_looked_at() -> None:
    # the worker's end: its transport closes the descriptor, whose number another file may then get
    async def main() -> None:
        read, write = os.pipe()
        transport, pipe = await open_raw_pipe(read, lambda _data: None)
        os.write(write, b"unread")
        transport.close()
        assert pipe.behind() is None
        os.close(write)

    asyncio.run(main())
