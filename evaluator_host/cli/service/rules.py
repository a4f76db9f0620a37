"""``evaluator-host rules list|create|test|show|pause|resume|delete|scores|stats|backfill|why|shadow|promote``:
online rules, through a running service (``backfill RULE_ID --since T [--until T] [--limit N] [--dry-run] [--wait]``:
score the stored traces the rule missed, ``cli/service/rule_backfills.py``; ``why TRACE_ID``: each rule's decision
for that trace and its reason;
``shadow RULE_ID [--revision N] [--limit N]``: its candidate revision against the live one — flips, mean delta,
agreement with reviews, examples; ``promote RULE_ID``: the candidate becomes live; ``create --candidate N``;
``redeliver RULE_ID [--states failed,skipped]``: the rule's failed sink deliveries sent again).
``create``/``test`` take the rule's body as options (``--level span`` scores each matching span,
``--level session [--session-key K] [--quiet-s N]`` each quiet session); ``test`` scores it now on the latest
matching stored targets, storing nothing, and exits 1 with a message when nothing matched.

Like the operator's commands (``cli/service/admin.py``) they talk to the service's HTTP API (``--server``,
default ``http://HOST:PORT`` of the settings), with a workspace key (``--api-key``, default
``EVALUATOR_HOST_API_KEY``; none for an open service). Output: a table, or one JSON object per line
with ``--json``. A 4xx/5xx answer is an error message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.remote import dumped, service_client, usage_errors
from evaluator_host.cli.service import rule_backfills

if TYPE_CHECKING:
    from evaluator_host.client import Client

__all__ = ["add_parser"]

API_KEY_ENV = "EVALUATOR_HOST_API_KEY"
_RULE_COLUMNS = ["id", "name", "evaluator_id", "revision", "sampling_rate", "enabled", "filter", "target"]
_SHADOW_COLUMNS = ["live_revision", "candidate_revision", "compared", "pass_to_fail", "fail_to_pass", "mean_delta"]
_EXAMPLE_COLUMNS = ["trace_id", "span_id", "flip", "delta", "live", "candidate"]
_TEST_COLUMNS = ["trace_id", "span_id", "session_id", "status", "score", "passed", "label", "reason"]


def _client(args: argparse.Namespace) -> Client:
    """A client of the service with the workspace key (none for an open service)."""
    return service_client(args.server, args.api_key or os.environ.get(API_KEY_ENV))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _print(args: argparse.Namespace, data: Any, columns: list[str]) -> None:
    items = data if isinstance(data, list) else [data]
    if args.json:
        for item in items:
            sys.stdout.write(json.dumps(item, separators=(",", ":")) + "\n")
        return
    from rich.console import Console  # rich: when a table is printed, not for building the parser
    from rich.table import Column, Table
    from rich.text import Text

    table = Table(*(Column(c, no_wrap=True) for c in columns))
    for item in items:
        table.add_row(*(Text(_cell(item.get(c))) for c in columns))  # plain text: no markup, no ":ok:" emoji
    console = Console()
    needed = console.measure(table, options=console.options.update_width(100_000)).maximum
    Console(width=max(console.width, needed)).print(table)


def _attribute(text: str) -> dict[str, Any]:
    """``KEY=VALUE`` (equals; VALUE parsed as JSON when it is JSON, else the string) or ``KEY`` (exists)."""
    key, sep, value = text.partition("=")
    if not sep:
        return {"key": key, "exists": True}
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    return {"key": key, "equals": parsed if isinstance(parsed, str | int | float | bool) else value}


def _filter(args: argparse.Namespace) -> dict[str, Any]:
    flt: dict[str, Any] = {}
    if args.service:
        flt["service_name"] = args.service
    if args.span:
        flt["span_name"] = args.span
    if args.attr:
        flt["attributes"] = [_attribute(a) for a in args.attr]
    return flt


def _target(args: argparse.Namespace) -> dict[str, Any] | None:
    """The rule's ``target`` from ``--level``, ``--session-key`` and ``--quiet-s`` (the last two: session level)."""
    if (args.session_key or args.quiet_s is not None) and args.level != "session":
        raise UsageError("--session-key and --quiet-s go with --level session")
    if not args.level:
        return None
    target: dict[str, Any] = {"level": args.level}
    if args.session_key:
        target["session_key"] = args.session_key
    if args.quiet_s is not None:
        target["quiet_s"] = args.quiet_s
    return target


def _create(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    if not args.target:
        raise UsageError(
            "rules create EVALUATOR_ID [--level trace|span|session [--session-key K] [--quiet-s N]] [--name N] "
            "[--rate R] [--service S] [--span S] [--attr K=V] ..."
        )
    mapping = {k: v for k, v in (("inputs", args.inputs), ("outputs", args.outputs)) if v}
    rule = client.create_rule(
        args.target, name=args.name or None, revision=args.revision or None, sampling_rate=args.rate,
        filter=_filter(args) or None, mapping=mapping or None, enabled=False if args.paused else None,
        target=_target(args), candidate_revision=args.candidate,
    )  # fmt: skip
    return dumped(rule)


def _test(client: Client, args: argparse.Namespace) -> int:
    if not args.target:
        raise UsageError("rules test EVALUATOR_ID [--level trace|span|session] [--span S] [--attr K=V] ... [--limit N]")
    mapping = {k: v for k, v in (("inputs", args.inputs), ("outputs", args.outputs)) if v}
    answer = dumped(
        client.test_online_rule(
            args.target,
            revision=args.revision or None,
            filter=_filter(args) or None,
            mapping=mapping or None,
            target=_target(args),
            limit=args.limit or 20,
        )  # fmt: skip
    )
    if not answer["matched"]:
        sys.stderr.write(f"{answer['message']}\n")
        return 1
    _print(args, answer["results"], _TEST_COLUMNS)
    return 0


def _shadow(client: Client, args: argparse.Namespace, rule_id: str) -> None:
    """``rules shadow RULE_ID [--revision N] [--limit N]``: the comparison (one line), each side's agreement with
    the rule's review verdicts, then its examples; ``--json``: the API's answer whole."""
    answer = dumped(client.rule_shadow(rule_id, revision=args.revision, examples=args.limit))
    if args.json:
        _print(args, answer, [])
        return
    _print(args, {**answer, **answer["flips"]}, _SHADOW_COLUMNS)
    if answer["message"]:
        sys.stdout.write(f"{answer['message']}\n")
    agreement = answer["agreement_with_reviews"]
    if agreement is None:
        sys.stdout.write(f"agreement with reviews: none ({answer['agreement_reason']})\n")
    else:
        for side in ("live", "candidate"):
            a = agreement[side]
            sys.stdout.write(
                f"agreement with reviews, {side} revision {a['revision']}: accuracy {a['accuracy']:.3f} "
                f"over {a['reviewed']} reviewed, cohen_kappa {a['cohen_kappa']}\n"
            )
    side = "{revision}:{status}:{score}:{passed}"
    rows = [
        {**e, "live": side.format(**e["live"]), "candidate": side.format(**e["candidate"])} for e in answer["examples"]
    ]
    if rows:
        _print(args, rows, _EXAMPLE_COLUMNS)


def _run(args: argparse.Namespace) -> int:
    action, target = args.action, args.target
    if action not in ("list", "create", "test") and not target:
        raise UsageError(f"rules {action} {'TRACE_ID' if action == 'why' else 'RULE_ID'}")
    with _client(args) as client, usage_errors(key_hint=f"--api-key or {API_KEY_ENV}"):
        if action == "test":
            return _test(client, args)
        if action == "backfill":
            return rule_backfills.backfill(client, args, target, _print)
        _act(client, args, action, target)
    return 0


def _act(client: Client, args: argparse.Namespace, action: str, target: str) -> None:
    if action == "list":
        _print(args, [dumped(r) for r in client.list_rules().data], _RULE_COLUMNS)
    elif action == "create":
        _print(args, _create(client, args), _RULE_COLUMNS)
    elif action == "show":
        _print(args, dumped(client.get_rule(target)), [*_RULE_COLUMNS, "candidate_revision", "mapping", "created_at"])
    elif action in ("pause", "resume"):
        _print(args, dumped(client.update_rule(target, enabled=action == "resume")), _RULE_COLUMNS)
    elif action == "delete":
        client.delete_rule(target)
        sys.stdout.write(f"deleted {target}\n")
    elif action == "why":  # target: a trace id
        decisions = dumped(client.get_trace(target))["decisions"]
        _print(args, decisions, ["rule_id", "target", "decision", "reason"])
    elif action == "shadow":
        _shadow(client, args, target)
    elif action == "promote":
        promoted = dumped(client.promote_rule(target))
        if not args.json:
            was = promoted["previous_revision"]
            was_text = "the latest" if was is None else f"revision {was}"
            sys.stdout.write(f"promoted revision {promoted['revision']} (was {was_text}); the rule now pins it\n")
        _print(args, promoted["rule"], [*_RULE_COLUMNS, "candidate_revision"])
    elif action == "redeliver":  # the rule's failed deliveries sent again (issue 52)
        answer = dumped(client.redeliver_rule_sinks(target, args.states.split(",") if args.states else None))
        if args.json:
            _print(args, answer, [])
        else:
            said = answer.get("message") or f"requeued {answer['requeued']} deliveries"
            sys.stdout.write(f"{said}\n")
    elif action == "scores":
        page = client.rule_scores(target, limit=args.limit or 50, since=args.since, until=args.until)
        columns = ["trace_id", "span_id", "session_id", "state", "status", "score", "passed", "label", "current"]
        columns += ["revision", "scored_at"]
        rows = [dumped(s) for s in page.data]
        if not args.json and any(r.get("sinks") for r in rows):  # each sink's delivery (issue 52)
            rows = [{**r, "sinks": " ".join(f"{x['type']}:{x['state']}" for x in r["sinks"]) or None} for r in rows]
            columns.append("sinks")
        _print(args, rows, columns)
    else:  # stats
        stats = dumped(client.rule_stats(target, bucket=args.bucket, since=args.since, until=args.until))
        rows = [{**b, "labels": b["labels"] or None} for b in stats["buckets"] if b["count"] or args.json]
        _print(args, rows, ["start", "count", "errors", "mean_score", "pass_rate", "labels"])
        if not args.json:
            sys.stdout.write(f"queued now: {stats['queued']}; dropped in the range: {stats['dropped']}\n")
            decided = ", ".join(f"{k} {n}" for k, n in sorted(stats["decisions"].items())) or "none"
            pending = ", ".join(f"{k} {n}" for k, n in stats["pending"].items())
            sys.stdout.write(f"decisions in the range: {decided}; pending now: {pending}\n")


def add_parser(sub: Any) -> None:
    """Add ``rules`` to the command line."""
    rules = sub.add_parser(
        "rules",
        help="online rules: list, create, test, show, pause, resume, delete, scores, stats, backfill, shadow, "
        "promote, redeliver; why TRACE_ID",
    )
    rules.add_argument(
        "action",
        choices=[
            "list", "create", "test", "show", "pause", "resume", "delete", "scores", "stats", "backfill", "why",
            "shadow", "promote", "redeliver",
        ],
    )  # fmt: skip
    rules.add_argument("target", nargs="?", help="create/test: the evaluator id; why: a trace id; others: the rule id")
    rules.add_argument(
        "--level",
        choices=["trace", "span", "session"],
        help="create/test: score each trace (default), each matching span, or each quiet session",
    )
    rules.add_argument(
        "--session-key",
        help="create/test, --level session: the attribute naming a trace's session (default: "
        "session.id, gen_ai.conversation.id, langfuse.session.id)",
    )
    rules.add_argument(
        "--quiet-s",
        type=int,
        help="create/test, --level session: seconds without a span before a session is scored (default 300)",
    )
    rules.add_argument("--name", help="create: a name to show")
    rules.add_argument(
        "--revision",
        type=int,
        help="create: the evaluator revision (default: the latest); shadow: the candidate compared (default: the "
        "rule's candidate, else its last one)",
    )
    rules.add_argument(
        "--candidate", type=int, help="create: a revision scored beside the live one, stored apart (see shadow)"
    )
    rules.add_argument("--rate", type=float, default=1.0, help="create: the sampling rate, 0..1 (default 1)")
    rules.add_argument("--service", help="create: match spans of this service.name")
    rules.add_argument("--span", help="create: match spans of this name")
    rules.add_argument(
        "--attr", action="append", metavar="KEY[=VALUE]", help="create: an attribute equals VALUE (or, bare, exists)"
    )
    rules.add_argument("--inputs", help="create: the trace path of the case's inputs")
    rules.add_argument("--outputs", help="create: the trace path of the case's outputs")
    rules.add_argument("--paused", action="store_true", help="create: paused")
    rules.add_argument(
        "--limit",
        type=int,
        help="scores: at most this many (default 50); test: targets scored (default 20); backfill: targets at most; "
        "shadow: examples (default 20)",
    )
    rules.add_argument("--since", help="scores/stats: from (ISO 8601); backfill: traces first seen from")
    rules.add_argument("--until", help="scores/stats: to (ISO 8601); backfill: traces first seen before")
    rules.add_argument("--dry-run", action="store_true", help="backfill: count what it would score, score nothing")
    rules.add_argument(
        "--backfill-id", help="backfill: show (with --wait: follow) this backfill instead of starting one"
    )
    rules.add_argument(
        "--wait",
        action="store_true",
        help="backfill: follow it until it ends (progress with cached/failed counts on stderr); exit 1 when it "
        "ended failed or cancelled",
    )
    rules.add_argument(
        "--states", help="redeliver: the delivery states sent again, comma-separated (default failed; or skipped)"
    )
    rules.add_argument("--bucket", type=int, default=60, help="stats: bucket seconds (default 60)")
    rules.add_argument("--server", help="URL of the running service (default: http://HOST:PORT of the settings)")
    rules.add_argument("--api-key", help=f"the workspace key (default: {API_KEY_ENV})")
    rules.add_argument("--json", action="store_true", help="one JSON object per line")
    rules.set_defaults(func=_run)
