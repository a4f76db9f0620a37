"""``evaluator-host review list|create|items|verdict|history|export|agreement|fixtures`` (issue 53): review queues
through a running service, like ``rules`` (``--server``, default ``http://HOST:PORT`` of the settings; ``--api-key``,
default ``EVALUATOR_HOST_API_KEY``; a table, or one JSON object per line with ``--json``; a 4xx/5xx answer is an
error message and exit status 2).

* ``create NAME --rule RULE_ID | --job JOB_ID [--score-below X | --score-above X | --failed | --label L ... |
  --status S ...] [--sample F] [--limit N]`` — a queue, filled at once;
* ``list`` — the workspace's queues and their progress;
* ``items QUEUE_ID [--state pending|reviewed] [--limit N]`` — items with the evaluator's answer and what it judged
  (the table: the job row or trace and the outputs, cut to 60 characters; ``--json``: whole, with the trace or
  the job row's inputs);
* ``verdict QUEUE_ID ITEM_ID --pass | --fail [--score X] [--label L] [--note TEXT]`` — the item's current verdict;
* ``history QUEUE_ID ITEM_ID`` — every verdict of the item, newest first (a replaced one ``current`` false);
* ``export QUEUE_ID [--format jsonl|csv] [--state reviewed|pending|all]`` — to stdout;
* ``agreement EVALUATOR_ID [--revision N]`` — the revision's agreement with the verdicts;
* ``fixtures QUEUE_ID [--item ID ...] [--tolerance T]`` — verdicts (default: every reviewed item) become the
  evaluator's fixtures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Literal

from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.remote import dumped, service_client, usage_errors
from evaluator_host.cli.service.rules import API_KEY_ENV
from evaluator_host.cli.service.rules import _print as print_rows  # the same table / JSON lines as `rules`

if TYPE_CHECKING:
    from evaluator_host.client import Client

__all__ = ["add_parser"]

_QUEUE_COLUMNS = ["id", "name", "evaluator_id", "source", "select", "sample", "limit", "items", "reviewed"]
_ITEM_COLUMNS = ["id", "state", "source", "revision", "status", "score", "passed", "label", "reason", "verdict"]
_ITEM_TABLE = [*_ITEM_COLUMNS[:2], "judged", *_ITEM_COLUMNS[3:], "outputs"]  # what a reviewer reads, one line
_VERDICT_COLUMNS = ["id", "item_id", "passed", "score", "label", "note", "reviewer", "created_at", "current"]
_AGREEMENT_COLUMNS = ["revision", "reviewed", "ran", "accuracy", "cohen_kappa", "confusion", "score_mae", "spearman"]
_SHOWN = 60  # characters of an item's outputs in the table (--json: whole)


def _judged(source: dict[str, Any]) -> str:
    """An item's source in a few characters: ``job_… #3`` or ``trace …`` (``/span`` at span level)."""
    if source.get("job_id"):
        return f"{source['job_id']} #{source['index']}"
    span = f"/{source['span_id']}" if source.get("span_id") else ""
    return f"trace {source.get('trace_id')}{span}"


def _short(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = text.replace("\n", " ")
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _select(args: argparse.Namespace) -> dict[str, Any] | None:
    given = {
        "score_below": args.score_below,
        "score_above": args.score_above,
        "passed": False if args.failed else None,
        "label_in": args.label or None,
        "status_in": args.status or None,
    }
    chosen = {k: v for k, v in given.items() if v is not None}
    if len(chosen) > 1:
        raise UsageError("give one of --score-below, --score-above, --failed, --label, --status")
    return chosen or None


def _create(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    if not args.target or (args.rule is None) == (args.job is None):
        raise UsageError("review create NAME --rule RULE_ID | --job JOB_ID [--score-below X | --failed | ...]")
    queue = client.create_review_queue(
        args.target[0], rule_id=args.rule, job_id=args.job, select=_select(args), sample=args.sample, limit=args.limit
    )
    return dumped(queue)


def _verdict(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    if len(args.target) != 2 or args.passed is None:
        raise UsageError("review verdict QUEUE_ID ITEM_ID --pass | --fail [--score X] [--label L] [--note TEXT]")
    queue_id, item_id = args.target
    made = client.give_verdict(queue_id, item_id, args.passed, score=args.score, label=args.label_of, note=args.note)
    return dumped(made)


def _one(args: argparse.Namespace, what: str) -> str:
    if len(args.target) != 1:
        raise UsageError(f"review {args.action} {what}")
    return str(args.target[0])


def _run(args: argparse.Namespace) -> int:
    with service_client(args.server, args.api_key or os.environ.get(API_KEY_ENV)) as client, usage_errors():
        action = args.action
        if action == "list":
            print_rows(args, [dumped(q) for q in client.list_review_queues().data], _QUEUE_COLUMNS)
        elif action == "create":
            print_rows(args, _create(client, args), _QUEUE_COLUMNS)
        elif action == "items":
            page = client.review_items(_one(args, "QUEUE_ID"), state=args.state, limit=args.limit or 50)
            rows = [dumped(i) for i in page.data]
            if not args.json:
                rows = [
                    {
                        **r,
                        "judged": _judged(r["source"]),
                        "outputs": _short(r["outputs"]),
                        "verdict": None if r["verdict"] is None else r["verdict"]["passed"],
                    }
                    for r in rows
                ]
            print_rows(args, rows, _ITEM_COLUMNS if args.json else _ITEM_TABLE)
        elif action == "verdict":
            print_rows(args, _verdict(client, args), ["id", "item_id", "passed", "score", "label", "note", "current"])
        elif action == "history":
            if len(args.target) != 2:
                raise UsageError("review history QUEUE_ID ITEM_ID")
            history = client.verdict_history(args.target[0], args.target[1])
            print_rows(args, [dumped(v) for v in history.data], _VERDICT_COLUMNS)
        elif action == "export":
            state: Literal["reviewed", "pending", "all"] = args.state or "reviewed"
            sys.stdout.write(client.export_review(_one(args, "QUEUE_ID"), args.format, state))
        elif action == "agreement":
            got = dumped(client.agreement(_one(args, "EVALUATOR_ID"), args.revision))
            print_rows(args, got, _AGREEMENT_COLUMNS)
            if not args.json:
                for name in ("cohen_kappa_reason", "spearman_reason"):
                    if got.get(name):
                        sys.stdout.write(f"{name}: {got[name]}\n")
        else:  # fixtures
            added = client.verdicts_to_fixtures(_one(args, "QUEUE_ID"), args.item or None, tolerance=args.tolerance)
            columns = ["evaluator_id", "revision", "added", "replaced", "fixtures", "disagreeing"]
            print_rows(args, dumped(added), columns)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``review`` to the command line."""
    review = sub.add_parser(
        "review",
        help="review queues: list, create, items, verdict, history, export; an evaluator's agreement; fixtures",
    )
    review.add_argument(
        "action", choices=["list", "create", "items", "verdict", "history", "export", "agreement", "fixtures"]
    )
    review.add_argument(
        "target", nargs="*", help="create: NAME; items/export/fixtures: QUEUE_ID; verdict/history: QUEUE_ID ITEM_ID; "
        "agreement: EVALUATOR_ID"
    )  # fmt: skip
    review.add_argument("--rule", help="create: the online rule whose scores fill the queue")
    review.add_argument("--job", help="create: the job whose results fill the queue")
    review.add_argument("--score-below", type=float, help="create: take scores below this")
    review.add_argument("--score-above", type=float, help="create: take scores above this")
    review.add_argument("--failed", action="store_true", help="create: take answers that did not pass")
    review.add_argument("--label", action="append", help="create: take this label (repeat for several)")
    review.add_argument("--status", action="append", help="create: take this status (repeat for several)")
    review.add_argument("--sample", type=float, help="create: the share taken, 0..1 (default 1)")
    review.add_argument("--limit", type=int, help="create: at most this many items (default 100); items: a page")
    review.add_argument("--state", choices=["pending", "reviewed", "all"], help="items/export: which items")
    verdict = review.add_mutually_exclusive_group()
    verdict.add_argument("--pass", dest="passed", action="store_const", const=True, help="verdict: it should pass")
    verdict.add_argument("--fail", dest="passed", action="store_const", const=False, help="verdict: it should fail")
    review.add_argument("--score", type=float, help="verdict: the score it should get")
    review.add_argument("--verdict-label", dest="label_of", help="verdict: the label it should get")
    review.add_argument("--note", help="verdict: why")
    review.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="export: jsonl (default) or csv")
    review.add_argument("--revision", type=int, help="agreement: the revision (default: the latest)")
    review.add_argument("--item", action="append", help="fixtures: an item id (repeat; default: every reviewed one)")
    review.add_argument("--tolerance", type=float, help="fixtures: the score tolerance (default 0.1)")
    review.add_argument("--server", help="URL of the running service (default: http://HOST:PORT of the settings)")
    review.add_argument("--api-key", help=f"the workspace key (default: {API_KEY_ENV})")
    review.add_argument("--json", action="store_true", help="one JSON object per line")
    review.set_defaults(func=_run)
