"""The parts of a model target on their own, offline (loopback servers only): Retry-After, budgets, the
prompt sandbox's bounds, the endpoint's egress rule, the HTTP/1.1 client and the chat client's retries."""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from collections.abc import Awaitable, Callable

import pytest

from evaluator_host.errors import TargetError
from evaluator_host.targets.budget import Budget, BudgetExhausted, Prices
from evaluator_host.targets.endpoint import Endpoint, check_endpoint
from evaluator_host.targets.http import ConnectionFailed, ConnectionPool, TooLarge
from evaluator_host.targets.openai import RETRY_AFTER_CAP_S, ChatClient, retry_after_s
from evaluator_host.targets.prompts import PromptTemplate, RenderError, row_messages
from tests.support.llm_server import llm_server


def test_retry_after_in_seconds_or_as_a_date_capped() -> None:
    now = 1_800_000_000.0
    assert retry_after_s("2") == 2.0 and retry_after_s(" 0.5 ") == 0.5
    assert retry_after_s(email.utils.formatdate(now + 7, usegmt=True), now=now) == pytest.approx(7.0)
    assert retry_after_s(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry_after_s("86400") == RETRY_AFTER_CAP_S
    assert retry_after_s("soon") is None and retry_after_s(None) is None and retry_after_s("nan") is None


def test_a_budget_is_never_passed_in_calls_and_stops_at_tokens() -> None:
    calls = Budget(max_calls=3, max_tokens_total=None)
    for _ in range(3):
        calls.take_call()
    with pytest.raises(BudgetExhausted, match="max_calls=3"):
        calls.take_call()
    assert calls.calls == 3
    tokens = Budget(max_calls=None, max_tokens_total=10)
    tokens.take_call()
    tokens.add_tokens(12)
    with pytest.raises(BudgetExhausted, match="max_tokens_total=10"):
        tokens.take_call()
    prices = Prices({"m": {"input_per_1k": 1.0, "output_per_1k": 3.0}})
    assert prices.cost("m", 1000, 500) == 2.5 and prices.cost("other", 1, 1) is None


ROW = {"question": "why?", "xs": list(range(2000)), "nested": {"a": [1, 2], "b": 3}}


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{{ missing }}", "undefined"),
        ("{{ question.__class__.__mro__ }}", "unsafe"),
        ("{{ question * 10000000 }}", "characters"),
        ("{{ [1] * 10000000 }}", "too large"),
        ("{{ 10 ** 100000 }}", "exponent"),
        ("{{ '%0999999d' % 1 }}", "%"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "iterates"),
        ("{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}", "iterates"),
        ("{% for k, v in nested.items() %}{% for i in range(999999) %}{% endfor %}{% endfor %}", "iterates"),
        ("{% for i in range(100000) %}{{ question }}{{ question }}{{ question }}{% endfor %}", "longer"),
        ("{% set d = {} %}{{ d.update({'a': 1}) }}", "unsafe"),
    ],
)
def test_a_template_past_a_bound_is_a_row_error(template: str, why: str) -> None:
    started = time.monotonic()
    with pytest.raises(RenderError, match=why):
        PromptTemplate(template).render(ROW)
    assert time.monotonic() - started < 30  # bounded: it ends (no timing claim beyond that)


@pytest.mark.parametrize(
    "template", ["{{ question ", "{% for %}", "{{ question|center(1000000) }}", "{{ lipsum(1000) }}" + "{{ x }"]
)
def test_a_template_that_does_not_compile_is_a_target_error(template: str) -> None:
    with pytest.raises(TargetError, match="not a valid Jinja2 template"):
        PromptTemplate(template)


def test_a_template_renders_rows_and_messages_columns_are_checked() -> None:
    template = PromptTemplate("{% for x in nested.a %}{{ x }},{% endfor %} {{ question|upper }} {{ xs|length }}")
    assert template.render(ROW) == "1,2, WHY? 2000"
    assert row_messages(ROW, template, None, "sys")[0] == {"role": "system", "content": "sys"}
    chat = {"m": [{"role": "user", "content": "hi"}]}
    assert row_messages(chat, None, "m", None) == [{"role": "user", "content": "hi"}]
    for bad in ({"m": "hi"}, {"m": []}, {"m": [{"role": "robot", "content": "x"}]}, {"other": 1}):
        with pytest.raises(RenderError):
            row_messages(bad, None, "m", None)


def _resolver(addresses: list[str]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(_host: str, _port: int) -> list[str]:
        return addresses

    return resolve


def test_the_endpoint_rule_is_the_egress_proxys() -> None:
    def check(url: str, allow: set[str], *, open_service: bool = False, addresses: list[str] | None = None) -> Endpoint:
        return asyncio.run(
            check_endpoint(
                url,
                allow,
                open_service=open_service,
                pinned={"llm.test": "127.0.0.1"},
                resolve=_resolver(addresses or ["93.184.216.34"]),
            )
        )

    assert check("https://api.example.com/v1", {"api.example.com:443"}).address == "93.184.216.34"
    assert check("http://llm.test:8080/v1", set(), open_service=True).address == "127.0.0.1"  # pinned, open
    assert check("http://llm.test:8080/v1", {"llm.test:8080"}).address == "127.0.0.1"  # pinned, allowed
    refusals = [
        ("http://llm.test:8080/v1", set(), False, None, "llm.test:8080 is not in"),  # a service with keys
        ("https://api.example.com/v1", {"api.example.com:8443"}, True, None, "api.example.com:443 is not in"),
        ("http://10.0.0.5/v1", {"10.0.0.5:80"}, True, None, "IP literal"),
        ("http://[::1]:80/v1", {"[::1]:80"}, True, None, "IP literal"),
        ("http://127.0.0.1:8080/v1", set(), True, None, re.escape("""EGRESS_HOSTS='{"llm.local": "127.0.0.1"}'""")),
        ("https://internal.example/v1", {"internal.example:443"}, False, ["10.1.2.3"], "not public"),
        ("https://meta.example/v1", {"meta.example:443"}, False, ["93.184.216.34", "169.254.169.254"], "not public"),
        ("https://six.example/v1", {"six.example:443"}, False, ["64:ff9b::a9fe:a9fe"], "not public"),
    ]
    for url, allow, open_service, addresses, why in refusals:
        with pytest.raises(TargetError, match=why):
            check(url, allow, open_service=open_service, addresses=addresses)


async def _raw_server(answer: Callable[[int], bytes | None]) -> tuple[asyncio.Server, int, list[int]]:
    """A loopback server answering its n-th request with ``answer(n)`` (None: close the connection without
    an answer; an answer saying ``Connection: close`` is followed by the close)."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                seen.append(len(seen))
                data = answer(len(seen))
                if data is None:
                    return
                writer.write(data)
                await writer.drain()
                if b"Connection: close" in data:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def test_the_http_client_reads_every_framing_and_keeps_its_bounds() -> None:
    async def run() -> None:
        ok = b'{"a": 1}'
        chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n5\r\n": 1}\r\n0\r\n\r\n'
        answers = {
            1: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ok), ok),
            2: chunked,
            3: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + ok,
            4: b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
        }
        server, port, seen = await _raw_server(lambda n: answers.get(n, b"not http\r\n\r\n"))
        pool = ConnectionPool(
            "127.0.0.1", port, f"llm.test:{port}", sni="llm.test", tls=None, max_idle=4, max_body=1024
        )
        head = pool.head("/v1/chat/completions", [("Content-Type", "application/json")])
        for _ in range(3):
            status, headers, body = await pool.post(head, b"{}", 5)
            assert status == 200 and body == ok
        with pytest.raises(TooLarge):
            await pool.post(head, b"{}", 5)
        with pytest.raises(ConnectionFailed, match="not an HTTP"):
            await pool.post(head, b"{}", 5)
        with pytest.raises(ValueError):
            pool.head("/x", [("Authorization", "Bearer a\r\nX-Injected: 1")])
        assert len(seen) == 5
        await pool.close()
        server.close()

    asyncio.run(run())


def test_a_kept_alive_connection_the_server_closed_is_replaced_and_a_silent_server_times_out() -> None:
    async def run() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        server, port, seen = await _raw_server(lambda n: ok if n % 2 else None)  # closes after each answer
        pool = ConnectionPool("127.0.0.1", port, "h", sni="h", tls=None, max_idle=4, max_body=1024)
        head = pool.head("/", [])
        assert (await pool.post(head, b"{}", 5))[2] == b"{}"
        await asyncio.sleep(0.05)
        assert (await pool.post(head, b"{}", 5))[2] == b"{}"  # the idle one was closed: a new one, silently
        await pool.close()
        server.close()
        hang, port, _ = await _raw_server(lambda n: None if n > 10**9 else b"")  # answers nothing at all
        pool = ConnectionPool("127.0.0.1", port, "h", sni="h", tls=None, max_idle=4, max_body=1024)
        with pytest.raises(TimeoutError):
            await pool.post(pool.head("/", []), b"{}", 0.3)
        await pool.close()
        hang.close()

    asyncio.run(run())


def test_the_chat_client_retries_slow_answers_and_429s_and_hides_the_key() -> None:
    async def run(port: int) -> None:
        endpoint = await check_endpoint(
            f"http://llm.test:{port}/v1", set(), open_service=True, pinned={"llm.test": "127.0.0.1"}
        )
        client = ChatClient(
            endpoint, api_key="sk-secret-1234", key_name="K", timeout_s=0.3, max_retries=2, connections=4,
            backoff=lambda _attempt: 0.0,
        )  # fmt: skip
        slow = await client.complete({"model": "m", "messages": [{"role": "user", "content": "slow"}]})
        assert slow.text is None and slow.attempts == 3 and "timed out" in (slow.error or "")
        llm.delay_s = 0.0
        llm.retry_after = email.utils.formatdate(time.time() + 1, usegmt=True)
        llm.plan("busy", [429])
        busy = await client.complete({"model": "m", "messages": [{"role": "user", "content": "busy"}]})
        assert busy.text == "A: busy" and busy.attempts == 2
        llm.plan("echo", [401])
        echo = await client.complete({"model": "m", "messages": [{"role": "user", "content": "echo"}]})
        assert echo.attempts == 1 and "sk-secret-1234" not in (echo.error or "") and "[secret K]" in (echo.error or "")
        await client.close()

    with llm_server(delay_s=1.0) as llm:
        asyncio.run(run(llm.port))
    assert llm.received["slow"] == 3 and llm.received["busy"] == 2


def test_a_refused_connection_is_retried_then_the_rows_error() -> None:
    async def run() -> None:
        endpoint = await check_endpoint(
            "http://llm.test:9/v1", set(), open_service=True, pinned={"llm.test": "127.0.0.1"}
        )  # nothing listens on port 9
        client = ChatClient(
            endpoint, api_key=None, key_name=None, timeout_s=5, max_retries=2, connections=1, backoff=lambda _a: 0.0
        )
        done = await client.complete({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert done.text is None and done.attempts == 3 and "connection failed" in (done.error or "")
        await client.close()

    asyncio.run(run())
