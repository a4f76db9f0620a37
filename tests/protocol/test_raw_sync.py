"""The host's side of the sync marks (``evaluator_host/sandbox/protocol.py``, :class:`RawSync`).

A reply can reach the host before the raw output written ahead of it (docker relays a container's
stdout and stderr on goroutines of their own): the flaky ``test_secrets[docker]``. A harness started
with ``sync`` announces each write of replies on its raw output; :class:`FrameReader` returns a frame
tagged ``seq`` only once its mark was read, and the marks never reach the kept raw output, wherever
the stream cuts them.
"""

from __future__ import annotations

import asyncio

import pytest

from evaluator_host.sandbox.protocol import SYNC_PREFIX, FrameReader, RawSync, encode_frame


def _mark(n: int) -> bytes:
    return SYNC_PREFIX + str(n).encode() + b"\0"


STREAM = b"before\n" + _mark(1) + b"raw \0 with a NUL, \0evaluator-host-sync:x\0 a bad mark\n" + _mark(2) + b"end\0"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 20, 1000])
def test_marks_are_stripped_wherever_the_stream_cuts_them(size: int) -> None:
    sync = RawSync()
    kept = b"".join(sync.strip(STREAM[i : i + size]) for i in range(0, len(STREAM), size)) + sync.close()
    assert kept == b"before\nraw \0 with a NUL, \0evaluator-host-sync:x\0 a bad mark\nend\0"
    assert sync.seen == 2


def test_a_frame_waits_for_its_mark_and_the_raw_output_before_it() -> None:
    async def go() -> None:
        reader = asyncio.StreamReader()
        sync = RawSync.attach(reader)
        frames = FrameReader(reader, 1 << 20)
        reader.feed_data(encode_frame({"type": "result", "index": 0, "seq": 1}))  # the reply first…
        waiting = asyncio.ensure_future(frames.next(30))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()  # …is not returned before its mark
        raw = sync.strip(b"written before the reply\n" + _mark(1))
        assert raw == b"written before the reply\n"
        assert (await waiting)["index"] == 0
        reader.feed_data(encode_frame({"type": "result", "index": 1}))  # untagged: not waited for
        assert (await frames.next(30))["index"] == 1

    asyncio.run(go())


def test_a_mark_that_never_comes_is_a_timeout_and_a_closed_raw_stream_waits_no_more() -> None:
    async def go() -> None:
        reader = asyncio.StreamReader()
        sync = RawSync.attach(reader)
        frames = FrameReader(reader, 1 << 20)
        reader.feed_data(encode_frame({"type": "result", "index": 0, "seq": 5}))
        with pytest.raises(TimeoutError):
            await frames.next(0.05)
        reader.feed_data(encode_frame({"type": "result", "index": 1, "seq": 6}))
        sync.close()  # the worker's raw stream ended (it died): what arrived is returned
        assert (await frames.next(30))["index"] == 1

    asyncio.run(go())
