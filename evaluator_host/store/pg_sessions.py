"""PostgreSQL sessions that a frozen service cannot leave holding rows (how ``make_engine`` connects).

Contract:

* Every session sets ``idle_in_transaction_session_timeout`` (:data:`IDLE_IN_TRANSACTION_MS`, a minute):
  the server ends a session that waits on its client between statements of a transaction, and the
  session's locks go with it. A service frozen there (SIGSTOP, a paused VM, a stalled thread) thus frees
  its job's row for another service's adoption (``FOR UPDATE SKIP LOCKED``, store/jobs/leases.py), which
  it would otherwise skip for as long as the service is frozen; when it continues, its next statement
  finds the session ended and a job's fenced commit is refused as after any adoption.
* The timeout runs only while the server waits for the next statement *after answering the last one*
  (PostgreSQL arms it when it sends ReadyForQuery, i.e. at a ``Sync``). A pipeline sends several
  statements before one ``Sync``: a session frozen mid-pipeline is "active", waiting on its client, with
  no timeout — and psycopg's ``executemany`` pipelines. A commit of a job's rows inserts them (a foreign
  key to the job: ``FOR KEY SHARE`` of the job's row, which ``FOR UPDATE SKIP LOCKED`` skips), so a
  service frozen mid-``executemany`` kept its job forever (the CI failure of
  ``test_a_paused_owner_continued_after_the_adoption_stores_no_row_of_the_job[docker-postgres]``).
  :class:`StatementAtATime` is therefore every session's cursor: its ``executemany`` runs one statement
  after another, each answered (and synced) before the next is sent: a round trip a statement (~70 µs
  on this machine's loopback, against ~15 µs a row pipelined; the online ingest bench measured no loss).
  A bulk write that matters sends one statement over arrays instead (``unnest``: a chunk's rows), or
  SQLAlchemy's multi-row ``INSERT … RETURNING`` batches, faster than either.
* A chunk's commit by the service that runs the job (``JobResults.commit_rows``: statements back to back, no
  call outside the database between them, retried on a fresh session while the job is still held) is bounded
  tighter: :func:`idle_bound` sets the timeout for that transaction alone (``set_config(…, is_local =>
  true)``) to the job's lease (``job_lease_s``, 10 s by default; never under 1 s, never over the session's own
  setting, and not at all where the session has none). A frozen owner's lease has run out by then anyway, and
  the minute was the adoption's delay: the paused-owner test (tests/faults/test_job_adoption.py, docker) was
  adopted 60 s after the signal in 3 runs of 5, 2 s in the others. Left at the minute: the transactions that
  end a job (``finish``, a worker host's last ``commit_shared``: they read and decode its stored results
  between statements when every row errored, which can outlast a short lease, and neither is retried) and an
  adoption's (it asks the datasets' store — a bucket's ``HEAD`` — about each candidate between statements).
* Left: the server also waits on its client, with no timeout, while a statement's own messages arrive — a
  ``COPY … FROM STDIN`` (the spans' group commit, store/online/span_inserts.py), or one statement larger than
  the socket's buffer. A service frozen while sending one holds what its transaction locked until it
  continues (a workspace's quota row, when it has a quota); never a job's row (a chunk's commit is a few
  kilobytes, sent in one write).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.abc import Params, Query
from sqlalchemy.engine import Connection

__all__ = ["IDLE_IN_TRANSACTION_MS", "LEAST_IDLE_S", "StatementAtATime", "idle_bound", "session_options"]

IDLE_IN_TRANSACTION_MS = 60_000
LEAST_IDLE_S = 1.0  # idle_bound's least (Settings.job_lease_s's least too)


class StatementAtATime(psycopg.Cursor[Any]):
    """A cursor whose ``executemany`` never pipelines (the module's contract): each statement of it is sent,
    answered and synced before the next, so the session is never left waiting on its client mid-pipeline.
    Same results otherwise (``rowcount`` the sum, ``returning`` as psycopg's)."""

    def executemany(self, query: Query, params_seq: Iterable[Params], *, returning: bool = False) -> None:
        with self._conn.lock:
            self._conn.wait(self._executemany_gen_no_pipeline(query, params_seq, returning))


def session_options(given: str | tuple[str, ...] | None) -> str:
    """The ``options`` of every session: UTC, :data:`IDLE_IN_TRANSACTION_MS`, then ``given`` (a URL's own
    ``options``, e.g. a ``search_path``), last, so they win."""
    own = ["-c timezone=UTC", f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"]
    extra = [given] if isinstance(given, str) else list(given or ())
    return " ".join([*own, *extra]).strip()


def idle_bound(conn: Connection, seconds: float) -> None:
    """On PostgreSQL, end ``conn``'s session should it wait on this service more than ``seconds`` between two
    statements of the transaction under way — at least :data:`LEAST_IDLE_S` (the job lease's own least: a
    store's shorter lease, as in tests, would end a live owner's commit on a machine that starved it for less),
    at most the session's own timeout (the minute, or a URL's ``options``: an operator's setting is never
    loosened), and nothing where the session has none (0: the operator turned it off). This transaction only:
    the session's setting returns with the next. Nothing on another database. Call it first in the
    transaction."""
    if conn.dialect.name == "postgresql":
        ms = round(max(seconds, LEAST_IDLE_S) * 1000)
        conn.exec_driver_sql(_BOUND, (ms,))


# one statement: the session's own setting (pg_settings: milliseconds) read and the smaller one set
_BOUND = (
    "SELECT set_config('idle_in_transaction_session_timeout', least(%s, own)::text, true)"
    " FROM (SELECT setting::bigint AS own FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout') AS s"
    " WHERE own > 0"
)
