"""The planner's statistics brought up to date before set-based statements that depend on them (PostgreSQL).

Contract:

* PostgreSQL plans a statement from the statistics ``ANALYZE`` gathers. Autovacuum refreshes a table's once its
  rows changed by 50 + 10 %, but only at its next round (``autovacuum_naptime``, a minute by default). Until then
  a table that grew from nothing or a few rows is planned as nearly empty: nested loops that read one side once
  per row of the other. A backfill makes exactly such tables — its first pages insert thousands of score rows, a
  first backfill writes the case keys a re-run joins next — and reads them at once (measured: a re-run of 5,000
  cached targets spent 6.6 s in one ``INSERT … SELECT`` that rejected 25 million joined rows, 20,000 took 62 s;
  a page's read 1.9 s; docs/benchmarks.md, issue 50).
* :func:`refresh` analyzes each of ``tables`` whose statistics are *stale*: at least :data:`STALE_MIN_ROWS`
  rows inserted, updated or deleted since its last analyze (``n_mod_since_analyze``) and more than the rows the
  planner believes it has (``reltuples``; never analyzed: none). So a table is analyzed each time it doubles,
  a handful of times over a backfill of 100,000 targets, and never for a trickle of changes, which autovacuum
  handles as before. Each ``ANALYZE`` runs in its own transaction with a short lock timeout: a table another
  session is analyzing (autovacuum, another service) is skipped — its statistics are on their way — and a
  failure is logged, never raised (statistics make a plan faster, not a result different). A role that does
  not own a table is warned by the server and skipped.
* Statistics describe the values a table held when it was analyzed: a value written since (a new backfill's id,
  a new rule's) is estimated as rare however fresh they are. :func:`analyze` is for the caller that just wrote
  many rows of such a value and reads them next; a statement that inserts into a table it also reads is written
  so that no plan reads the rows it inserts (``case_hashes.resolve_cached``).
* SQLite needs none of it (its planner assumes an index selective without statistics): nothing is done there.
* Cost: one catalog read a call; an ``ANALYZE`` samples at most 30,000 rows (``default_statistics_target`` 100).

Blocking: call from a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

__all__ = ["STALE_MIN_ROWS", "analyze", "refresh", "stale"]

log = logging.getLogger(__name__)

STALE_MIN_ROWS = 1000  # fewer changes cost a plan little however it is made
_LOCK_TIMEOUT_MS = 100

_STALE = text(
    "SELECT c.relname FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
    "WHERE c.oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest(CAST(:tables AS text[])) AS t)) "
    "AND s.n_mod_since_analyze >= :least AND s.n_mod_since_analyze > greatest(c.reltuples, 0)"
).bindparams(bindparam("tables"), bindparam("least"))


def stale(engine: Engine, tables: Sequence[str]) -> list[str]:
    """The ones of ``tables`` whose statistics are stale (see the module docstring); none on SQLite."""
    if engine.dialect.name != "postgresql" or not tables:
        return []
    with engine.connect() as conn:
        names = conn.execute(_STALE, {"tables": list(tables), "least": STALE_MIN_ROWS}).scalars()
        found = {str(name) for name in names}
    return [t for t in tables if t in found]


def refresh(engine: Engine, tables: Sequence[str]) -> list[str]:
    """``ANALYZE`` the stale ones of ``tables`` (see the module docstring); the ones analyzed."""
    return analyze(engine, stale(engine, tables))


def analyze(engine: Engine, tables: Sequence[str]) -> list[str]:
    """``ANALYZE`` each of ``tables`` now, stale or not (a caller that knows it just wrote many rows with values the
    statistics cannot know: a backfill's id); the ones analyzed (none on SQLite)."""
    if engine.dialect.name != "postgresql":
        return []
    done = []
    for table in tables:
        try:
            with engine.begin() as conn:
                conn.execute(text(f"SET LOCAL lock_timeout = {_LOCK_TIMEOUT_MS}"))
                conn.execute(text(f'ANALYZE "{table}"'))
        except DBAPIError as exc:  # being analyzed by another session (its lock), or the server said no
            log.info("statistics of %s not refreshed: %s", table, exc.orig)
            continue
        done.append(table)
    return done
