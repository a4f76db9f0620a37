"""A target scored again with another revision supersedes the target's earlier scores: one statement a slice of
a page's targets, not one a target (issue 50: a re-run after a new evaluator revision spent a quarter of its time
on one compiled ``UPDATE`` a target).

Contract of :func:`families`: for each (rule id, target id) given whose target is ``<base>@r<revision>`` or
``<base>``, the rule's ``done`` rows of ``<base>`` and of ``<base>@r<n>`` (the target's *family*; any ``n``) but
the target's own, not superseded yet, get ``superseded_by`` = that target id. The rows are found in the primary
key's range of the family (:func:`~evaluator_host.store.online.refs.targets_of`) and told apart from other
targets sorting in it (a span target ``<trace>/<span>`` beside its trace's) by the exact family predicate. Two
targets of one family in one call: the last given supersedes (the same rows as one statement a target in that
order, but neither target's own row marks the other's). How many rows it marked.

Portable SQL (SQLite ≥ 3.33 and PostgreSQL: ``UPDATE … FROM`` a ``VALUES`` list); statements of at most
:data:`SLICE` targets, sized in powers of two so that a database sees few distinct texts. Call inside the
transaction that stored the scores.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from functools import lru_cache

from sqlalchemy import Connection

from evaluator_host.store.online.rows import OnlineScoreRow

__all__ = ["SLICE", "families", "family_base"]

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
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for (rule_id, base), target in last.items():
        by_rule.setdefault(rule_id, []).append((target, base))
    if not by_rule:
        return 0
    postgres = conn.dialect.name == "postgresql"
    mark = "%s" if postgres else "?"
    jit = _jit_off(conn) if postgres else None
    marked = 0
    for rule_id, rows in by_rule.items():
        for part in _slices(rows):
            flat = (*itertools.chain.from_iterable(part), rule_id)  # in the text's order: the rows, then the rule
            marked += conn.exec_driver_sql(_sql(len(part), mark), flat).rowcount
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


def _slices(rows: Sequence[tuple[str, str]]) -> Iterator[Sequence[tuple[str, str]]]:
    start = 0
    while start < len(rows):
        n = min(SLICE, 1 << ((len(rows) - start).bit_length() - 1))  # the largest power of two left
        yield rows[start : start + n]
        start += n


@lru_cache(maxsize=64)
def _sql(n: int, mark: str) -> str:
    row = f"({mark}, {mark})"
    values = ", ".join([row] * n)
    t = _TABLE
    # the rule a parameter, not a column of v: PostgreSQL then cannot hash-join every row of the rule on it (it
    # did: 33 s a slice at 200,000 rows), and probes the primary key's range of each family as SQLite does
    return (
        f"UPDATE {t} SET superseded_by = v.target "
        f"FROM (SELECT column1 AS target, column2 AS base FROM (VALUES {values}) AS w) AS v "
        f"WHERE {t}.rule_id = {mark} AND {t}.target_id >= v.base AND {t}.target_id < v.base || '@s' "
        f"AND ({t}.target_id = v.base OR substr({t}.target_id, 1, length(v.base) + 2) = v.base || '@r') "
        f"AND {t}.target_id <> v.target AND {t}.state = 'done' AND {t}.superseded_by IS NULL"
    )
