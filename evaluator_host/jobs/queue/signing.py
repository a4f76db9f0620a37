"""Chunk tasks are signed by the service and verified by worker hosts before anything runs.

Anyone who can write to the broker (Redis) could otherwise enqueue a chunk task naming any job and
any rows, and a worker host would run those rows under the job's evaluator and workspace and commit
them as the job's results. So:

* The service signs each task: HMAC-SHA256 over ``(job_id, owner, rows)`` under a key derived from
  the first of ``EVALUATOR_HOST_SECRETS_KEY``'s keys (which the service and every host already share:
  hosts decrypt the secrets their jobs list). A host verifies it under each listed key (so a rotation
  can restart hosts first, then the service) before it reads the job or a row; an unsigned task, a
  wrong signature, or a signed task whose job id, owner or rows were changed is refused — logged and
  counted (``evaluator_host_queue_tasks_refused``), acknowledged, never run.
* What a signature cannot say is still checked against the job's own record in the database: the job
  is unfinished and the task's owner's (else the chunk is dropped), every index lies within the job's
  rows and appears once, and the revision run is the job's own (the task names none).
* A replayed task (a signed one sent again) is harmless: rows already stored are skipped, and a
  finished job's chunks are dropped.

The key comes from configuration, never from a data dir of one machine: with a queue and no
``EVALUATOR_HOST_SECRETS_KEY`` the service and the worker hosts refuse to start
(:class:`QueueKeyMissing`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from evaluator_host.settings import Settings

__all__ = ["QueueKeyMissing", "sign", "task_keys", "verify"]

_CONTEXT = b"evaluator-host/queue-chunk-task/v1"


class QueueKeyMissing(ValueError):
    """A queue is configured without ``EVALUATOR_HOST_SECRETS_KEY``: tasks could not be signed or verified."""


def task_keys(settings: Settings) -> list[bytes]:
    """The task-signing keys (the first signs, every one verifies); :class:`QueueKeyMissing` when none."""
    if not settings.secrets_key:
        raise QueueKeyMissing(
            "EVALUATOR_HOST_QUEUE_URL is set but EVALUATOR_HOST_SECRETS_KEY is not: the service signs chunk "
            "tasks and worker hosts verify them with a key derived from it, so both need the same value "
            "(docs/operations.md, Scaling out)"
        )
    keys = []
    for key in settings.secrets_key:
        try:
            raw = base64.urlsafe_b64decode(key.encode())
        except ValueError as exc:
            raise QueueKeyMissing("EVALUATOR_HOST_SECRETS_KEY must be Fernet keys (url-safe base64)") from exc
        keys.append(hmac.new(raw, _CONTEXT, hashlib.sha256).digest())
    return keys


def _message(job_id: str, owner: str, rows: str) -> bytes:
    return json.dumps([job_id, owner, rows], ensure_ascii=False).encode()


def sign(key: bytes, job_id: str, owner: str, rows: str) -> str:
    """The task's signature (hex) under ``key``."""
    return hmac.new(key, _message(job_id, owner, rows), hashlib.sha256).hexdigest()


def verify(keys: list[bytes], job_id: object, owner: object, rows: object, signature: object) -> bool:
    """Whether ``signature`` is a valid signature of the task under one of ``keys`` (anything not a
    string is not)."""
    if not (isinstance(job_id, str) and isinstance(owner, str) and isinstance(rows, str)):
        return False
    if not isinstance(signature, str):
        return False
    message = _message(job_id, owner, rows)
    return any(
        hmac.compare_digest(hmac.new(key, message, hashlib.sha256).hexdigest().encode(), signature.encode())
        for key in keys
    )
