"""The Celery app both sides build from :class:`Settings`, and the Redis names they share.

Contract:

* One task, :data:`CHUNK_TASK`, carries ``(job_id, owner, rows, signature)`` (``queue.signing``): rows
  are dataset lines with their indices (``queue.chunks``), so hosts need no shared disk. Its messages
  are acknowledged *after* the chunk is committed (``task_acks_late``), handed back when the process running it dies
  (``task_reject_on_worker_lost``; a host killed outright leaves them unacknowledged in Redis, and any
  live host puts them back in the queue once ``queue_visibility_s`` has passed), and a host takes one
  message per free lane (``worker_prefetch_multiplier`` 1), so a new host gets work at once and a
  draining one holds nothing it has not started.
* No result backend: results go to the database, the only record of a job.
* :data:`CANCEL_CHANNEL` is a Redis pub/sub channel: the service publishes a job id there when the
  job is cancelled or deleted, and hosts stop its running chunks at once (a job status check per chunk
  and a poll of running jobs' status cover a missed message).
* :class:`CancelListener` is a host's ear on that channel: a thread that hands each job id published
  there to a callback and, when Redis is away, listens again a second later until stopped.
* :func:`row_seconds_key` holds the latest observed time per row of a job (hosts write it, the
  service sizes chunks with it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import Celery

from evaluator_host.settings import Settings

__all__ = ["CANCEL_CHANNEL", "CHUNK_TASK", "CancelListener", "make_app", "redis_client", "row_seconds_key"]

log = logging.getLogger(__name__)

CHUNK_TASK = "evaluator_host.chunk"
CANCEL_CHANNEL = "evaluator-host:cancel"


def row_seconds_key(job_id: str) -> str:
    """The Redis key of ``job_id``'s observed seconds per row (on one lane of a host)."""
    return f"evaluator-host:row-s:{job_id}"


def _redis_py_url(url: str) -> str:
    """``url`` as redis-py writes it: kombu's ``redis+socket:///path`` is redis-py's ``unix:///path``."""
    parts = urlsplit(url)
    if parts.scheme == "redis+socket":
        return f"unix://{parts.path}" + (f"?{parts.query}" if parts.query else "")
    return url


def redis_client(settings: Settings) -> redis.Redis:
    """A Redis client on the queue's server (for pub/sub and the keys above, not for tasks)."""
    assert settings.queue_url is not None
    return redis.Redis.from_url(
        _redis_py_url(settings.queue_url), socket_timeout=10, socket_connect_timeout=5, health_check_interval=10
    )


def make_app(settings: Settings) -> Celery:
    """The Celery app on ``settings.queue_url`` with the semantics in the module's contract."""
    assert settings.queue_url is not None, "make_app needs EVALUATOR_HOST_QUEUE_URL"
    app = Celery("evaluator_host", broker=settings.queue_url, set_as_current=False)
    visibility = settings.queue_visibility_s
    options: dict[str, Any] = {
        "visibility_timeout": visibility,
        # sweep for messages of dead hosts often enough that one is back within ~1.25 × the timeout
        "unacked_restore_interval": max(1, min(30, int(visibility / 4))),
        "unacked_restore_throttle": 1,
        "socket_timeout": 30,
        "socket_connect_timeout": 5,
        "health_check_interval": 10,
    }
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=settings.queue_name,
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a restarting Redis is waited for, never given up on
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        # the remote-control channel (pub/sub) stays on: its connection is always watched by the worker's
        # loop, which is how a host notices Redis restarting while every lane is busy (no BRPOP pending)
        worker_enable_remote_control=True,
        worker_send_task_events=False,
        broker_heartbeat=0,
        enable_utc=True,
    )
    return app


class CancelListener:
    """A thread calling ``cancel(job_id)`` for each job id published on :data:`CANCEL_CHANNEL` (from
    :meth:`start` until :meth:`stop`); a Redis away is listened to again a second later."""

    def __init__(self, client: redis.Redis, cancel: Callable[[str], None]) -> None:
        self._redis = client
        self._cancel = cancel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="evh-cancel-listener", daemon=True)

    def start(self) -> None:
        """Start listening (a daemon thread)."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop listening; wait up to ``timeout_s`` for the thread (it checks every half second)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call]
                    pubsub.subscribe(CANCEL_CHANNEL)
                    while not self._stop.is_set():
                        message = pubsub.get_message(timeout=0.5)
                        if message:
                            self._cancel(message["data"].decode())
            except (redis.RedisError, OSError) as exc:
                log.warning("the cancel channel is away (%s); listening again in 1 s", exc)
                self._stop.wait(1.0)
