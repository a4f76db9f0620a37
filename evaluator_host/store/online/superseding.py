"""What a stored score supersedes, a slice of a call's scores a statement, each found by an index (its family's
key range, its session's (workspace, session)): not one compiled ``UPDATE`` a target (issue 50: a re-run after a
new evaluator revision spent a quarter of its time on those), and never a scan of every ``done`` row (a session
score's statements had no usable index but the queue's ``state``: each read every done row of every rule).

Contract:

* :func:`families` — for each (rule id, target id) given whose target is ``<base>@r<revision>`` or ``<base>``, the
  rule's ``done`` rows of ``<base>`` and of ``<base>@r<n>`` (the target's *family*; any ``n``) but the target's
  own, not superseded yet, get ``superseded_by`` = that target id. The rows are found in the family's key range
  (:func:`~evaluator_host.store.online.refs.targets_of`) and told apart from other targets sorting in it (a span
  target ``<trace>/<span>`` beside its trace's) by the exact family predicate. Two targets of one family in one
  call: the last given supersedes the family's other rows, the other's too. How many rows it marked.
* :func:`sessions` — for each stored session score (rule id, target id ``<session>#<generation>[@r<n>]``,
  workspace id, session id, generation): the (rule, session)'s ``done`` rows of an earlier generation (and, the
  target being a revision's — ``@r`` after the generation, :func:`is_revision` — of its own generation) but its
  own, not superseded yet, get ``superseded_by`` = that target; then, when a ``done`` row of a later generation
  exists, the score itself is superseded by the latest such (ties: the greatest target id, a revision's). Several
  scores of one (rule, session) in one call: the one of the latest generation (a revision's before its
  generation's first; ties: the last given) does both, the others being among the rows it marks. The rows are
  matched on (workspace, session) by that index — by equality, not by a range of target ids: how ``#`` sorts is
  the database's collation's (PostgreSQL under a glibc or ICU "shifted" locale put ``s#3`` past ``s$``).

Portable SQL (SQLite ≥ 3.33 and PostgreSQL: ``UPDATE … FROM`` a ``VALUES`` list); statements of at most
:data:`SLICE` targets of one rule — the rule a parameter, not a joined column: PostgreSQL hash-joined every row of
the rule on it (33 s a slice at 200,000 rows) — sized in powers of two so that a database sees few distinct texts.
On PostgreSQL ``jit`` is off for them and as it was after. Call inside the transaction that stored the scores.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection

from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.sqlite_bulk import power_slices

__all__ = ["SLICE", "families", "family_base", "is_revision", "sessions"]

SLICE = 512  # targets a statement at most (a power of two)
_TABLE = OnlineScoreRow.__tablename__


def family_base(target: str) -> str:
    """The target id a revision's target was made from: ``<base>`` of ``<base>@r<revision>``, else ``target``."""
    return target.split("@r", 1)[0]


def families(conn: Connection, keys: Sequence[tuple[str, str]]) -> int:
    """Mark the earlier scores of each key's family superseded by the key (see the module docstring)."""
    last: dict[tuple[str, str], str] = {}
    for rule_id, target in keys:
        base = family_base(target)
        last.pop((rule_id, base), None)  # the last given wins, in the order given
        last[(rule_id, base)] = target
    by_rule: dict[str, list[tuple[Any, ...]]] = {}
    for (rule_id, base), target in last.items():
        by_rule.setdefault(rule_id, []).append((target, base))
    return _run(conn, (by_rule, _families_sql))


def sessions(conn: Connection, scores: Sequence[tuple[str, str, str, str, int]]) -> int:
    """Mark what each session score (rule id, target id, workspace id, session id, generation) supersedes, and the
    score itself when a later generation is scored already (see the module docstring). How many rows it marked."""
    winner: dict[tuple[str, str, str], tuple[int, int, str]] = {}
    for rule_id, target, workspace_id, session_id, generation in scores:
        rank = (int(generation), int(is_revision(target)))
        held = winner.get((rule_id, workspace_id, session_id))
        if held is None or rank >= held[:2]:
            winner[(rule_id, workspace_id, session_id)] = (*rank, target)
    by_rule: dict[str, list[tuple[Any, ...]]] = {}
    for (rule_id, workspace_id, session_id), (generation, revision, target) in winner.items():
        by_rule.setdefault(rule_id, []).append((target, workspace_id, session_id, generation, revision))
    winners = {rule_id: [(row[0],) for row in rows] for rule_id, rows in by_rule.items()}
    return _run(conn, (by_rule, _earlier_sql), (winners, _later_sql))


def is_revision(session_target: str) -> bool:
    """Whether a session's target id (``<session id>#<generation>[@r<revision>]``) is a revision's: ``@r`` after
    the generation (a session id may hold ``@r`` itself: ``bob@realm``)."""
    return "@r" in session_target.rsplit("#", 1)[-1]


Work = tuple[dict[str, list[tuple[Any, ...]]], Callable[[int, str], str]]  # each rule's rows, a statement's text


def _run(conn: Connection, *work: Work) -> int:
    """Each work's rows by rule, a slice a statement of its ``sql(rows, mark)`` (parameters: the slice's rows, then
    the rule), the works in order; on PostgreSQL ``jit`` off around them all. How many rows they marked."""
    if not any(by_rule for by_rule, _ in work):
        return 0
    postgres = conn.dialect.name == "postgresql"
    mark = "%s" if postgres else "?"
    jit = _jit_off(conn) if postgres else None
    marked = 0
    for by_rule, sql in work:
        for rule_id, rows in by_rule.items():
            for part in power_slices(rows, SLICE):
                flat = (*itertools.chain.from_iterable(part), rule_id)  # in the text's order: the rows, then the rule
                marked += conn.exec_driver_sql(sql(len(part), mark), flat).rowcount
    if jit is not None:
        conn.exec_driver_sql("SELECT set_config('jit', %s, true)", (jit,))
    return marked


def _jit_off(conn: Connection) -> str:
    """PostgreSQL's ``jit`` off for this transaction's next statements; its value before. PostgreSQL estimates
    ~100 rows a family's range (there are 1–3), so a slice's estimated cost passes ``jit_above_cost`` and each
    statement was compiled for 0.44 s to run in 5 ms (measured: 200,000 rows, a 512-target slice)."""
    before = str(conn.exec_driver_sql("SELECT current_setting('jit')").scalar())
    conn.exec_driver_sql("SELECT set_config('jit', 'off', true)")
    return before


def _values(n: int, width: int, mark: str) -> str:
    row = "(" + ", ".join([mark] * width) + ")"
    return ", ".join([row] * n)


def _marking(n: int, mark: str, columns: tuple[str, ...], match: str) -> str:
    """``UPDATE`` setting ``superseded_by`` = ``v.target`` on the rule's ``done`` rows not superseded yet, other than
    ``v.target``, that ``match`` (SQL of the table and ``v``) pairs with a row ``v`` of ``n`` rows of ``columns``
    (``target`` first) — the rule the last parameter."""
    t = _TABLE
    named = ", ".join(f"column{i + 1} AS {c}" for i, c in enumerate(columns))
    return (
        f"UPDATE {t} SET superseded_by = v.target FROM (SELECT {named} FROM (VALUES {_values(n, len(columns), mark)}) "
        f"AS w) AS v WHERE {match} AND {t}.rule_id = {mark} AND {t}.state = 'done' AND {t}.superseded_by IS NULL "
        f"AND {t}.target_id <> v.target"
    )


@lru_cache(maxsize=64)
def _families_sql(n: int, mark: str) -> str:
    t = _TABLE
    family = (
        f"{t}.target_id >= v.base AND {t}.target_id < v.base || '@s' "
        f"AND ({t}.target_id = v.base OR substr({t}.target_id, 1, length(v.base) + 2) = v.base || '@r')"
    )
    return _marking(n, mark, ("target", "base"), family)


def _in_session(row: str, of: str) -> str:
    """``row`` (a table name or alias) is a score of the session of ``of`` (an alias with ``workspace_id`` and
    ``session_id``): matched by equality, by the (workspace, session) index — not by a range of target ids, whose
    order around ``#`` is the database's collation's (PostgreSQL under a glibc locale put ``s#3`` past ``s$``)."""
    return f"{row}.workspace_id = {of}.workspace_id AND {row}.session_id = {of}.session_id"


@lru_cache(maxsize=64)
def _earlier_sql(n: int, mark: str) -> str:
    t = _TABLE
    earlier = f"{_in_session(t, 'v')} AND ({t}.generation < v.gen OR (v.redone = 1 AND {t}.generation = v.gen))"
    return _marking(n, mark, ("target", "workspace_id", "session_id", "gen", "redone"), earlier)


@lru_cache(maxsize=64)
def _later_sql(n: int, mark: str) -> str:
    t = _TABLE
    later = (
        f"FROM {t} AS n WHERE n.rule_id = {t}.rule_id AND {_in_session('n', t)} "
        f"AND n.state = 'done' AND n.generation > {t}.generation"
    )
    return (
        f"UPDATE {t} SET superseded_by = (SELECT n.target_id {later} ORDER BY n.generation DESC, n.target_id DESC "
        f"LIMIT 1) WHERE {t}.target_id IN ({', '.join([mark] * n)}) AND {t}.rule_id = {mark} "
        f"AND EXISTS (SELECT 1 {later})"
    )
