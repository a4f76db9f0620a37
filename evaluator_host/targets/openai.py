"""The client of an OpenAI-compatible chat-completions endpoint: one call, retried as the target says.

Contract:

* :meth:`ChatClient.complete` POSTs ``{base_url}/chat/completions`` (``model``, ``messages``, and
  ``temperature`` / ``max_tokens`` when set) to the checked address (:mod:`evaluator_host.targets.endpoint`;
  ``Host`` and TLS's SNI name the host) over kept-alive connections (:mod:`evaluator_host.targets.http`),
  with ``Authorization: Bearer <key>`` when the target has a key,
  and answers a :class:`Completion`: the first choice's text and finish reason, the usage, the latency
  of the call that answered and the attempts made — or its ``error`` (never raised).
* 429, 5xx, a timeout (``timeout_s`` per call) and a lost connection are retried, at most
  ``max_retries`` times, after an exponential back-off with full jitter (``backoff``), or after the
  answer's ``Retry-After`` (seconds or an HTTP date) when it gives one, capped at ``RETRY_AFTER_CAP_S``.
  Other answers (4xx, a body that is not a chat completion) are the row's error at once.
* Before each call ``before_call()`` is asked (the job's budget): when it raises, no call is sent and the
  exception goes to the caller (the job stops).
* The key is in nothing a call answers: every error is cut, and in the error, the text and the finish reason
  any occurrence of the key is replaced by ``[secret NAME]`` (an endpoint that echoes the key back, in an
  error or in a completion, stores nothing of it). ``status`` is the HTTP status of an answer that was
  not a retried one (401, 403, 404, …), for the job to tell a refusal from a row's failure.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from evaluator_host.errors import TargetError
from evaluator_host.targets.endpoint import Endpoint
from evaluator_host.targets.http import ConnectionFailed, ConnectionPool, TooLarge

__all__ = ["RETRY_AFTER_CAP_S", "ChatClient", "Completion", "jitter_backoff", "retry_after_s"]

RETRY_AFTER_CAP_S = 60.0
_BODY_LIMIT = 8 * 1024 * 1024  # an answer larger than this is an error
_ERROR_TEXT = 300  # characters of an error answer's body kept in the row's error
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def jitter_backoff(attempt: int) -> float:
    """Full jitter: a random wait in [0, min(0.5 · 2^attempt, 20)] seconds before retry ``attempt + 1``."""
    return random.uniform(0.0, min(0.5 * 2.0**attempt, 20.0))


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from now (capped at ``RETRY_AFTER_CAP_S``), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(seconds, RETRY_AFTER_CAP_S))


@dataclass
class Completion:
    """One row's call: the text (None when it failed), what came back with it, and why it failed."""

    text: str | None
    finish_reason: str | None = None
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    latency_ms: float = 0.0
    attempts: int = 0
    error: str | None = None
    status: int | None = None  # the HTTP status of a final answer other than 200
    start_ns: int = 0
    end_ns: int = 0


class _Retry(Exception):
    def __init__(self, reason: str, wait_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait_s = wait_s


class ChatClient:
    """Calls one endpoint for one job (at most ``connections`` kept-alive connections; ``tls``: the
    context an ``https`` endpoint is verified with, default the system's CAs)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        api_key: str | None,
        key_name: str | None,
        timeout_s: float,
        max_retries: int,
        connections: int,
        tls: ssl.SSLContext | None = None,
        backoff: Callable[[int], float] = jitter_backoff,
    ) -> None:
        self.endpoint = endpoint
        self._key = api_key
        self._key_name = key_name or "key"
        self.max_retries = max_retries
        self.backoff = backoff
        headers = [("Content-Type", "application/json"), ("Accept", "application/json")]
        if api_key:
            headers.append(("Authorization", f"Bearer {api_key}"))
        self.timeout_s = timeout_s
        if endpoint.scheme == "https" and tls is None:
            tls = ssl.create_default_context()
        self._pool = ConnectionPool(
            endpoint.address,
            endpoint.port,
            endpoint.netloc,
            sni=endpoint.host,
            tls=tls if endpoint.scheme == "https" else None,
            max_idle=connections,
            max_body=_BODY_LIMIT,
        )
        try:
            self._head = self._pool.head(f"{endpoint.path}/chat/completions", headers)
        except ValueError:
            raise TargetError(
                f"the value of secret {self._key_name!r} cannot be sent in a header (CR, LF or NUL)"
            ) from None

    async def close(self) -> None:
        await self._pool.close()

    def _clean(self, text: str) -> str:
        """``text`` cut, the key (if any) replaced by its secret's name."""
        return self._redacted(text[: _ERROR_TEXT * 2])

    def _redacted(self, text: str) -> str:
        """``text`` with the key (if any) replaced by its secret's name."""
        if self._key and self._key in text:
            text = text.replace(self._key, f"[secret {self._key_name}]")
        return text

    async def complete(self, body: dict[str, Any], before_call: Callable[[], None] = lambda: None) -> Completion:
        """The completion of ``body`` (model, messages, …), retried as the module's contract says."""
        payload = _encode(body)
        attempt = 0
        last = ""
        while True:
            before_call()  # the budget: raises (nothing sent) when spent
            attempt += 1
            start_ns = time.time_ns()
            started = time.perf_counter()
            try:
                done = await self._once(payload)
                done.attempts, done.start_ns, done.end_ns = attempt, start_ns, time.time_ns()
                done.latency_ms = round((time.perf_counter() - started) * 1000.0, 3)
                if done.error is not None:
                    done.error = self._clean(done.error)
                if done.text is not None:
                    done.text = self._redacted(done.text)
                if done.finish_reason is not None:
                    done.finish_reason = self._redacted(done.finish_reason)
                return done
            except _Retry as retry:
                last = retry.reason
                if attempt > self.max_retries:
                    return Completion(
                        None,
                        attempts=attempt,
                        start_ns=start_ns,
                        end_ns=time.time_ns(),
                        latency_ms=round((time.perf_counter() - started) * 1000.0, 3),
                        error=self._clean(f"the model call failed after {attempt} attempt(s): {last}"),
                    )
                wait = retry.wait_s if retry.wait_s is not None else self.backoff(attempt - 1)
                await asyncio.sleep(wait)

    async def _once(self, payload: bytes) -> Completion:
        try:
            status, headers, raw = await self._pool.post(self._head, payload, self.timeout_s)
        except TimeoutError:
            raise _Retry(f"timed out after {self.timeout_s:g} s") from None
        except ConnectionFailed as exc:
            raise _Retry(f"connection failed ({exc})") from None
        except TooLarge as exc:
            return Completion(None, error=str(exc))
        if status == 429 or status >= 500:
            raise _Retry(f"HTTP {status}: {_text(raw)}", retry_after_s(headers.get("retry-after")))
        if status != 200:
            return Completion(None, error=f"HTTP {status}: {_text(raw)}", status=status)
        return _parsed(raw)


def _text(raw: bytes) -> str:
    return raw[:_ERROR_TEXT].decode("utf-8", "replace").strip()


def _parsed(raw: bytes) -> Completion:
    """The completion a 200 answer holds, or one with the error saying what is wrong with it."""
    try:
        data = _decode(raw)
        choice = data["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content")
        if text is None:
            text = ""
        if not isinstance(text, str):
            return Completion(None, error="the answer's choices[0].message.content is not a string")
        usage = data.get("usage") or {}
        counts = {
            k: int(usage.get(k) or 0) if isinstance(usage.get(k), (int, float)) else 0
            for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        }
        if not counts["total_tokens"]:
            counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
        reason = choice.get("finish_reason")
        return Completion(text, finish_reason=reason if isinstance(reason, str) else None, usage=counts)
    except (msgspec.DecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError):
        return Completion(None, error=f"the answer is not a chat completion: {_text(raw)}")
