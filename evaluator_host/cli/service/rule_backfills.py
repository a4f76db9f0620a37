"""``evaluator-host rules backfill RULE_ID``: a rule's backfill through a running service (``rules.py`` parses it).

* ``[--since T] [--until T] [--limit N] --dry-run``: the dry run's figures (traces, targets, already_scored,
  estimate_s, revision), nothing stored.
* ``[--since T] [--until T] [--limit N]``: the backfill started — a row of ``id, status, total, done, skipped,
  cached, failed, revision`` (``cached``: its targets answered from the result cache, part of ``done``).
* ``--backfill-id BF``: that backfill of the rule now, instead of starting one.
* ``--wait``: follows it (a GET every :data:`POLL_S`) until it is no longer ``running``: a line on stderr each time
  its status or a count changed (``bf_… running: 40/100 scored · 10 skipped · 30 cached · 0 failed``), then its
  row (``--json``: the API's object) on stdout; Ctrl-C stops following, the backfill goes on (exit 130).

Exit status: 1 when the backfill shown ended ``failed`` (every target it scored failed; its reason on stderr) or
``cancelled``, or ended ``done`` with no target at all (nothing stored in its range: said on stderr) — a backfill
that scored nothing never exits 0 as if it had; 0 otherwise (every target already scored, ``skipped``, is 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evaluator_host.cli.remote import dumped

if TYPE_CHECKING:
    from evaluator_host.client import Client

__all__ = ["BACKFILL_COLUMNS", "DRY_RUN_COLUMNS", "POLL_S", "backfill", "progress"]

BACKFILL_COLUMNS = ["id", "status", "total", "done", "skipped", "cached", "failed", "revision"]
DRY_RUN_COLUMNS = ["traces", "targets", "already_scored", "estimate_s", "revision"]
POLL_S = 0.5

Show = Callable[[argparse.Namespace, Any, list[str]], None]


def progress(b: dict[str, Any]) -> str:
    """One line of a backfill's progress: its status and every count."""
    line = (
        f"{b['id']} {b['status']}: {b['done']}/{b['total']} scored · {b['skipped']} skipped · "
        f"{b.get('cached', 0)} cached · {b.get('failed', 0)} failed"
    )
    return line + (f" · {b['cancelled']} cancelled" if b.get("cancelled") else "")


def backfill(client: Client, args: argparse.Namespace, rule_id: str, show: Show) -> int:
    """Run ``rules backfill`` (see the module docstring); its exit status."""
    if args.backfill_id:
        answer = dumped(client.get_backfill(rule_id, args.backfill_id))
    else:
        answer = dumped(
            client.backfill_rule(
                rule_id, since=args.since, until=args.until, limit=args.limit, dry_run=True if args.dry_run else None
            )
        )
        if args.dry_run:
            show(args, answer, DRY_RUN_COLUMNS)
            return 0
    if args.wait:
        try:
            answer = _follow(client, rule_id, answer)
        except KeyboardInterrupt:
            sys.stderr.write(f"stopped following {answer['id']}; the backfill goes on\n")
            return 130
    show(args, answer, BACKFILL_COLUMNS)
    if answer.get("reason"):
        sys.stderr.write(f"{answer['reason']}\n")
    if answer["status"] == "done" and not answer["total"]:  # nothing stored in the range: nothing was scored
        sys.stderr.write(f"{answer['id']}: no stored target of the rule in that range; nothing was scored\n")
        return 1
    return 1 if answer["status"] in ("failed", "cancelled") else 0


def _follow(client: Client, rule_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    """Poll the backfill until it is no longer running; a line on stderr each time it changed."""
    said = ""
    while True:
        line = progress(answer)
        if line != said:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            said = line
        if answer["status"] != "running":
            return answer
        time.sleep(POLL_S)
        answer = dumped(client.get_backfill(rule_id, answer["id"]))
