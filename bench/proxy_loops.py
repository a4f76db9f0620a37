"""The egress proxy alone on each event loop (issue 55): ``python -m bench.proxy_loops [unix|tcp] [in_flight]``.

One :class:`~evaluator_host.sandbox.egress.proxy.EgressGate` in a process of its own (``--proxy LOOP``), the
clients and a judge answering after 200 ms in this one (asyncio): rounds of ``in_flight`` plain ``http://``
requests at once through the gate's unix socket, or through a TCP listener the gate serves as it serves a
sandbox's handed-over proxy port (``tcp``). Per loop, alternately (asyncio, uvloop, three times): the proxy
process's CPU per connection and a request's time. Not in ``make bench`` (docs/benchmarks.md quotes it).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROUNDS, WARM, LATENCY_S = 10, 2, 0.2


async def _proxy(judge_port: int, tcp: bool) -> None:
    from evaluator_host.sandbox.egress.proxy import EgressProxy

    proxy = EgressProxy({"judge.test": "127.0.0.1"})
    gate = await proxy.open()
    dest = f"judge.test:{judge_port}"
    gate.bind("ws", (dest,), in_flight=64)
    proxy.workspace_allow["ws"] = frozenset({dest})
    where = str(gate.path)
    if tcp:
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        listener.setblocking(False)
        gate.listener = await asyncio.start_server(gate._serve, sock=listener, backlog=1024)  # type: ignore[arg-type]  # noqa: SLF001
        where = f"tcp:{listener.getsockname()[1]}"
    print(where, flush=True)
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    while await lines.readline():  # each line: say the CPU used so far (the log emptied)
        gate.take()
        print(json.dumps(time.process_time()), flush=True)
    await gate.close()
    proxy.close()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(LATENCY_S)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()


async def _request(where: str, port: int, took: list[float]) -> None:
    started = time.perf_counter()
    if where.startswith("tcp:"):
        reader, writer = await asyncio.open_connection("127.0.0.1", int(where[4:]))
    else:
        reader, writer = await asyncio.open_unix_connection(where)
    writer.write(f"GET http://judge.test:{port}/x HTTP/1.1\r\nHost: judge.test:{port}\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    took.append(time.perf_counter() - started)


async def _measure(loop_name: str, tcp: bool, in_flight: int) -> str:
    judge = await asyncio.start_server(_answer, "127.0.0.1", 0, backlog=1024)
    port = judge.sockets[0].getsockname()[1]
    argv = [sys.executable, "-m", "bench.proxy_loops", "--proxy", loop_name, str(port), "tcp" if tcp else "unix"]
    side = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert side.stdin is not None and side.stdout is not None
    where = (await side.stdout.readline()).decode().strip()

    async def cpu() -> float:
        assert side.stdin is not None and side.stdout is not None
        side.stdin.write(b"cpu\n")
        await side.stdin.drain()
        return float(await side.stdout.readline())

    took: list[float] = []
    for _ in range(WARM):
        await asyncio.gather(*(_request(where, port, []) for _ in range(in_flight)))
    before = await cpu()
    for _ in range(ROUNDS):
        await asyncio.gather(*(_request(where, port, took) for _ in range(in_flight)))
    used = await cpu() - before
    side.stdin.close()
    await side.wait()
    judge.close()
    return (
        f"{loop_name:8} proxy CPU per connection {used * 1000 / (ROUNDS * in_flight):.3f} ms, "
        f"request mean {statistics.fmean(took) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--proxy"]:
        if sys.argv[2] == "uvloop":
            import uvloop

            uvloop.install()
        asyncio.run(_proxy(int(sys.argv[3]), sys.argv[4] == "tcp"))
    else:
        over_tcp = sys.argv[1:2] == ["tcp"]
        n = int(sys.argv[2]) if len(sys.argv) > 2 else (128 if over_tcp else 64)
        print(f"{'tcp' if over_tcp else 'unix'}, {n} in flight, load {os.getloadavg()[0]:.1f}")
        for _ in range(3):
            for name in ("asyncio", "uvloop"):
                print(asyncio.run(_measure(name, over_tcp, n)))
