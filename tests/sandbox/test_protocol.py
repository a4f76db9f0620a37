"""evaluator_host.sandbox.protocol: frames of a 4-byte big-endian length and UTF-8 JSON.

Everything runs on real ``asyncio.StreamReader`` objects fed with bytes: round trips
(unicode, nesting, a payload exactly at the limit and one larger than the reader's 1 MiB
read), a frame fed a byte at a time, a burst of frames in one feed, frames too large
refused from their header alone, truncated streams, invalid JSON and the per-wait
timeout of ``FrameReader.next`` (a timeout loses no bytes). No rule for non-object JSON
exists in the code, so none is tested.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from evaluator_host.sandbox.protocol import FrameReader, FrameTooLarge, encode_frame, read_frame

MAX = 1 << 22
MESSAGES: list[dict[str, Any]] = [
    {},
    {"type": "result", "id": 7, "ok": True, "score": 0.5, "none": None},
    {"text": "héllo wörld ✓ 日本語 🎉", "key ünïcode": "\u0000\u2028"},
    {"nested": {"a": [1, [2, [3, {"b": [None, False, {"c": "deep"}]}]]]}, "empty": {"l": [], "d": {}}},
]


def run(scenario: Callable[[asyncio.StreamReader], Awaitable[Any]]) -> Any:
    """Run ``scenario`` with a fresh StreamReader created inside the event loop."""

    async def main() -> Any:
        return await scenario(asyncio.StreamReader())

    return asyncio.run(main())


def header(size: int) -> bytes:
    return struct.pack(">I", size)


async def feed_slowly(reader: asyncio.StreamReader, data: bytes, step: int, eof: bool = False) -> None:
    """Feed ``data`` in pieces of ``step`` bytes, letting the consumer run between pieces."""
    for i in range(0, len(data), step):
        reader.feed_data(data[i : i + step])
        await asyncio.sleep(0)
    if eof:
        reader.feed_eof()


# --------------------------------------------------------------------------- encode_frame


@pytest.mark.parametrize("message", MESSAGES)
def test_encode_frame_is_big_endian_length_then_the_json_payload(message: dict[str, Any]) -> None:
    frame = encode_frame(message)
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    assert json.loads(frame[4:].decode("utf-8")) == message


LENIENT: list[Any] = [
    *MESSAGES,
    {"nan": float("nan"), "inf": [float("inf"), -float("inf")], "big": 10**40, "tiny": 5e-324, "neg": -0.0},
    {"lone surrogate": "\ud800", "escapes": '"\\\n\t\x7f\u2028', 1: "int key", 2.5: "float key", None: "null key"},
    {"tuple": (1, "two", (3.0,)), "bools": [True, False], "case": {"inputs": {"q": "2+2?"}, "outputs": "4"}},
]


@pytest.mark.parametrize("message", LENIENT)
def test_encode_frame_writes_exactly_the_standard_librarys_json_non_finite_numbers_and_all(message: Any) -> None:
    # the run frame's encoder is made once, not per call: its text stays json.dumps's, byte for byte (NaN and
    # Infinity as the harnesses parse them, ASCII escapes, keys turned to strings)
    assert encode_frame(message)[4:] == json.dumps(message, separators=(",", ":")).encode()


def test_encode_frame_refuses_a_value_that_is_not_json_as_the_standard_library_does() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_frame({"cases": [{"inputs": object()}]})
    assert json.loads(encode_frame({"after": "a refusal"})[4:]) == {"after": "a refusal"}  # nothing left over


# --------------------------------------------------------------------------- read_frame


@pytest.mark.parametrize("message", MESSAGES)
def test_read_frame_round_trips_encode_frame(message: dict[str, Any]) -> None:
    async def scenario(reader: asyncio.StreamReader) -> Any:
        reader.feed_data(encode_frame(message))
        return await read_frame(reader, MAX)

    assert run(scenario) == message


def test_read_frame_accepts_a_payload_of_exactly_max_bytes() -> None:
    message = {"blob": "x" * 100_000}
    frame = encode_frame(message)

    async def scenario(reader: asyncio.StreamReader) -> Any:
        reader.feed_data(frame)
        return await read_frame(reader, len(frame) - 4)

    assert run(scenario) == message


def test_read_frame_assembles_a_frame_fed_one_byte_at_a_time() -> None:
    message = MESSAGES[2]

    async def scenario(reader: asyncio.StreamReader) -> Any:
        feeder = asyncio.create_task(feed_slowly(reader, encode_frame(message), step=1))
        result = await read_frame(reader, MAX)
        await feeder
        return result

    assert run(scenario) == message


def test_read_frame_refuses_a_too_large_frame_from_its_header_leaving_the_payload_unread() -> None:
    payload = json.dumps({"blob": "y" * 64}).encode()

    async def scenario(reader: asyncio.StreamReader) -> bytes:
        reader.feed_data(header(len(payload)) + payload)
        reader.feed_eof()
        with pytest.raises(FrameTooLarge, match=f"{len(payload)} bytes exceeds {len(payload) - 1}"):
            await read_frame(reader, len(payload) - 1)
        return await reader.read()

    assert run(scenario) == payload


def test_read_frame_raises_frame_too_large_without_waiting_for_the_payload() -> None:
    async def scenario(reader: asyncio.StreamReader) -> None:
        reader.feed_data(header(MAX + 1))  # the payload never comes, and neither does EOF
        async with asyncio.timeout(5):
            await read_frame(reader, MAX)

    with pytest.raises(FrameTooLarge):
        run(scenario)


@pytest.mark.parametrize(
    ("data", "partial"),
    [(b"", b""), (b"\x00\x00", b"\x00\x00"), (header(10) + b'{"a":', b'{"a":')],
    ids=["empty", "half-header", "half-payload"],
)
def test_read_frame_raises_incomplete_read_on_a_truncated_stream(data: bytes, partial: bytes) -> None:
    async def scenario(reader: asyncio.StreamReader) -> None:
        reader.feed_data(data)
        reader.feed_eof()
        await read_frame(reader, MAX)

    with pytest.raises(asyncio.IncompleteReadError) as caught:
        run(scenario)
    assert caught.value.partial == partial


@pytest.mark.parametrize("payload", [b"{not json", b"\xff\xfe\x00", b""], ids=["syntax", "not-utf8", "empty"])
def test_read_frame_raises_value_error_on_an_invalid_json_payload(payload: bytes) -> None:
    async def scenario(reader: asyncio.StreamReader) -> None:
        reader.feed_data(header(len(payload)) + payload)
        await read_frame(reader, MAX)

    with pytest.raises(ValueError):
        run(scenario)


# --------------------------------------------------------------------------- FrameReader


def test_frame_reader_returns_every_frame_of_a_burst_in_order_then_eof() -> None:
    async def scenario(reader: asyncio.StreamReader) -> list[Any]:
        reader.feed_data(b"".join(encode_frame(m) for m in MESSAGES))
        reader.feed_eof()
        frames = FrameReader(reader, MAX)
        got = [await frames.next(5) for _ in MESSAGES]
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await frames.next(5)
        assert caught.value.partial == b""
        return got

    assert run(scenario) == MESSAGES


def test_frame_reader_returns_buffered_frames_without_waiting_and_times_out_when_none_is_left() -> None:
    async def scenario(reader: asyncio.StreamReader) -> list[Any]:
        reader.feed_data(b"".join(encode_frame({"n": n}) for n in range(3)))
        frames = FrameReader(reader, MAX)
        got = [await frames.next(5)]
        got += [await frames.next(0), await frames.next(0)]  # already read in the first burst
        with pytest.raises(TimeoutError):
            await frames.next(0)
        return got

    assert run(scenario) == [{"n": 0}, {"n": 1}, {"n": 2}]


@pytest.mark.parametrize("step", [1, 3, 7])
def test_frame_reader_assembles_frames_split_across_many_small_feeds(step: int) -> None:
    data = b"".join(encode_frame(m) for m in MESSAGES)

    async def scenario(reader: asyncio.StreamReader) -> list[Any]:
        feeder = asyncio.create_task(feed_slowly(reader, data, step, eof=True))
        frames = FrameReader(reader, MAX)
        got = [await frames.next(5) for _ in MESSAGES]
        await feeder
        return got

    assert run(scenario) == MESSAGES


def test_frame_reader_reads_a_frame_larger_than_one_read_of_one_mebibyte() -> None:
    message = {"blob": "z" * (3 << 20)}
    frame = encode_frame(message)

    async def scenario(reader: asyncio.StreamReader) -> Any:
        reader.feed_data(frame + encode_frame({"after": 1}))
        frames = FrameReader(reader, len(frame) - 4)  # exactly at the limit
        return [await frames.next(5), await frames.next(5)]

    assert run(scenario) == [message, {"after": 1}]


def test_frame_reader_keeps_a_partial_frame_across_a_timeout() -> None:
    frame = encode_frame({"late": "row"})

    async def scenario(reader: asyncio.StreamReader) -> Any:
        frames = FrameReader(reader, MAX)
        reader.feed_data(frame[:6])
        with pytest.raises(TimeoutError):
            await frames.next(0.01)
        reader.feed_data(frame[6:])
        return await frames.next(5)

    assert run(scenario) == {"late": "row"}


def test_frame_reader_refuses_a_too_large_frame_from_its_header_alone() -> None:
    async def scenario(reader: asyncio.StreamReader) -> None:
        reader.feed_data(encode_frame({"ok": 1}) + header(MAX + 1))  # no payload, no EOF
        frames = FrameReader(reader, MAX)
        assert await frames.next(5) == {"ok": 1}
        await frames.next(5)

    with pytest.raises(FrameTooLarge, match=f"{MAX + 1} bytes exceeds {MAX}"):
        run(scenario)


@pytest.mark.parametrize(
    "tail",
    [b"\x00", header(10), header(10) + b'{"a":'],
    ids=["partial-header", "header-only", "partial-payload"],
)
def test_frame_reader_raises_incomplete_read_with_the_leftover_bytes_at_eof(tail: bytes) -> None:
    async def scenario(reader: asyncio.StreamReader) -> None:
        reader.feed_data(encode_frame({"first": True}) + tail)
        reader.feed_eof()
        frames = FrameReader(reader, MAX)
        assert await frames.next(5) == {"first": True}
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await frames.next(5)
        assert caught.value.partial == tail

    run(scenario)


def test_frame_reader_raises_value_error_on_invalid_json_and_continues_with_the_next_frame() -> None:
    bad = b"[1, 2"

    async def scenario(reader: asyncio.StreamReader) -> Any:
        reader.feed_data(header(len(bad)) + bad + encode_frame({"next": "frame"}))
        frames = FrameReader(reader, MAX)
        with pytest.raises(ValueError):
            await frames.next(5)
        return await frames.next(5)

    assert run(scenario) == {"next": "frame"}
