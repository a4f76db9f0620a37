"""A fenced commit's refusal, whichever way it comes (issue 54: a job held by a lease, adopted by another service).

Contract of :func:`fenced` (``JobResults.commit_rows``' transaction, whose statements run inside
:func:`uncommitted`):

* The commit's own fence (the job unfinished and this owner's, in the commit's transaction) raises
  :class:`JobNotHeld` itself, with :func:`not_held`'s wording.
* A commit that fails in the database instead — its session ended by the server while this service was frozen
  (``idle_in_transaction_session_timeout``, store/pg_sessions.py), a lost connection — is refused the same way
  when the job, read afresh (``holds``), is no longer this owner's: it was adopted meanwhile, and the caller
  stops as after any adoption.
* A job still held whose connection was lost (or whose session the server ended) at one of the transaction's
  statements, before its ``COMMIT`` was sent, stored nothing (only a ``COMMIT`` makes a transaction land): it is
  committed once more on a fresh connection, so a freeze during which nobody adopted the job, or a database
  restarted meanwhile, costs nothing. A failure at the ``COMMIT`` itself (its outcome unknown), any other
  error (an ``IntegrityError``, a second failure), or the database away while ``holds`` asks propagates, as
  the database raised it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError

from evaluator_host.errors import JobNotHeld

__all__ = ["fenced", "not_held", "uncommitted"]

T = TypeVar("T")


class _Uncommitted(Exception):
    """A database error at a statement of the transaction, before its ``COMMIT`` (carried: ``error``)."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


def not_held(job_id: str, what: str) -> str:
    """:class:`JobNotHeld`'s message (one wording, whichever way the commit was refused)."""
    return f"job {job_id!r} is finished, deleted or another service's: {what}"


@contextmanager
def uncommitted() -> Iterator[None]:
    """Around a transaction's statements (not its ``COMMIT``): a database error there is known not to have landed."""
    try:
        yield
    except DBAPIError as exc:
        raise _Uncommitted(exc) from exc


def _connection_gone(exc: DBAPIError) -> bool:
    """Whether the connection was lost, or the server ended the session (SQLSTATE 25P03: idle in a transaction)."""
    return bool(exc.connection_invalidated) or getattr(exc.orig, "sqlstate", None) == "25P03"


def fenced(job_id: str, commit: Callable[[], T], holds: Callable[[], bool]) -> T:
    """``commit()``'s answer, or its refusal as the module's contract says."""
    for attempt in (0, 1):
        try:
            return commit()
        except (DBAPIError, _Uncommitted) as raised:
            exc, before_commit = (raised.error, True) if isinstance(raised, _Uncommitted) else (raised, False)
            if isinstance(exc, IntegrityError):
                raise exc from None
            try:
                held = holds()
            except DBAPIError:
                raise exc from None  # the database away: its first error is the one to see
            if not held:
                raise JobNotHeld(not_held(job_id, f"its commit failed ({type(exc.orig).__name__})")) from exc
            if attempt or not (before_commit and _connection_gone(exc)):
                raise exc from None
    raise AssertionError("unreachable")
