"""``evaluator-host workspaces …`` and ``keys …``: the operator's commands, through a running service
(``workspaces adopt-default``: a key for the default workspace, which holds what was made before keys).

They talk to the service's HTTP API (``--server``, default ``http://HOST:PORT`` of the settings)
with the operator key (``--admin-key``, default ``EVALUATOR_HOST_ADMIN_KEY``), never to the
database directly: a revocation must reach the key cache of the process that serves requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.remote import dumped, service_client, usage_errors

if TYPE_CHECKING:
    from evaluator_host.client import Client

__all__ = ["add_parsers"]

_QUOTAS = ("max_concurrent_jobs", "max_warm_workers", "max_dataset_bytes", "max_evaluations_per_s")


def _client(args: argparse.Namespace) -> Client:
    """A client of the service with the operator key."""
    from evaluator_host.settings import Settings

    key = args.admin_key or Settings().admin_key
    if not key:
        raise UsageError("the operator key is needed: --admin-key or EVALUATOR_HOST_ADMIN_KEY")
    return service_client(args.server, key)


def _print(args: argparse.Namespace, data: Any, columns: list[str]) -> None:
    """One JSON object per line (``--json``), else a table whose cells are never cut: ids and keys
    are copied into the next command, so the table takes the width it needs (80 columns when
    piped would otherwise end them in "…")."""
    if args.json:
        for item in data if isinstance(data, list) else [data]:
            sys.stdout.write(json.dumps(item, separators=(",", ":")) + "\n")
        return
    from rich.console import Console  # rich: when a table is printed, not for building the parser
    from rich.table import Column, Table

    table = Table(*(Column(c, no_wrap=True) for c in columns))
    for item in data if isinstance(data, list) else [data]:
        table.add_row(*(str(item.get(c)) if item.get(c) is not None else "-" for c in columns))
    console = Console()
    needed = console.measure(table, options=console.options.update_width(100_000)).maximum
    Console(width=max(console.width, needed)).print(table)


def _quota(text: str) -> tuple[str, float | None]:
    name, sep, value = text.partition("=")
    if not sep or name not in _QUOTAS:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(_QUOTAS)}")
    if value in ("", "none", "null"):
        return name, None
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None


def _shown(args: argparse.Namespace, row: dict[str, Any]) -> dict[str, Any]:
    """A workspace as a table shows it (JSON output keeps it whole)."""
    if args.json:
        return row
    quotas = ", ".join(f"{k}={v:g}" for k, v in row["quotas"].items() if v is not None)
    return {**row, "quotas": quotas or "-", "network_allow": " ".join(row["network_allow"]) or "-"}


DEFAULT_WORKSPACE = "ws_default"  # evaluator_host.tenancy.models.DEFAULT_WORKSPACE (the CLI talks HTTP only)


def _adopt_default(args: argparse.Namespace) -> None:
    """``workspaces adopt-default [--rename NAME] [--key-name NAME]``: everything made before keys were
    turned on lives in the default workspace (``ws_default``); name it (optional) and make it a key,
    shown once, that sees it all. Nothing moves: the data stays where it is, now reachable."""
    if args.name:
        raise UsageError("workspaces adopt-default [--rename NAME] [--key-name NAME] (it takes no positional name)")
    with _client(args) as client, usage_errors():
        if args.rename:
            client.update_workspace(DEFAULT_WORKSPACE, name=args.rename)
        created = dumped(client.create_key(DEFAULT_WORKSPACE, args.key_name or "adopted"))
    _print(args, created, ["id", "workspace_id", "name", "key"])
    if not args.json:
        sys.stderr.write(
            f"this key acts in {DEFAULT_WORKSPACE}{f' ({args.rename})' if args.rename else ''}, which holds everything "
            "made before keys were turned on; it is shown this once: store it now\n"
        )


def _workspaces(args: argparse.Namespace) -> int:
    if args.action in ("create", "update") and not args.name:
        usage = (
            "create NAME"
            if args.action == "create"
            else "update WORKSPACE_ID [--quota NAME=VALUE] [--network-allow HOST:PORT]"
        )
        raise UsageError(f"workspaces {usage}")
    if args.action == "adopt-default":
        _adopt_default(args)
        return 0
    with _client(args) as client, usage_errors():
        if args.action == "create":
            _print(args, dumped(client.create_workspace(args.name)), ["id", "name"])
        elif args.action == "list":
            rows = [dumped(w) for w in client.list_workspaces().data]
            _print(args, [_shown(args, row) for row in rows], ["id", "name", "quotas", "network_allow"])
        else:  # update
            quotas = None
            if args.quota:
                quotas = {n: (int(v) if v is not None and n != _QUOTAS[3] else v) for n, v in args.quota}
            allow = args.network_allow
            if allow is not None and allow == ["none"]:
                allow = []
            row = client.update_workspace(args.name, name=args.rename or None, quotas=quotas, network_allow=allow)
            _print(args, _shown(args, dumped(row)), ["id", "name", "quotas", "network_allow"])
    return 0


def _keys(args: argparse.Namespace) -> int:
    if args.action in ("create", "revoke") and not args.target:
        raise UsageError("keys create WORKSPACE_ID [--name NAME]" if args.action == "create" else "keys revoke KEY_ID")
    with _client(args) as client, usage_errors():
        if args.action == "create":
            created = client.create_key(args.target, args.name or "key")
            _print(args, dumped(created), ["id", "workspace_id", "name", "key"])
            if not args.json:
                sys.stderr.write("the key is shown this once: store it now\n")
        elif args.action == "list":
            rows = [dumped(k) for k in client.list_keys(args.target or None).data]
            _print(args, rows, ["id", "workspace_id", "name", "prefix", "last_used_at", "revoked_at"])
        else:  # revoke
            client.revoke_key(args.target)
            sys.stdout.write(f"revoked {args.target}\n")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", help="URL of the running service (default: http://HOST:PORT of the settings)")
    parser.add_argument("--admin-key", help="the operator key (default: EVALUATOR_HOST_ADMIN_KEY)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def add_parsers(sub: Any) -> None:
    """Add ``workspaces`` and ``keys`` to the command line."""
    workspaces = sub.add_parser(
        "workspaces",
        help="create, list or update workspaces; adopt-default: a key for what was made before keys (operator key)",
        description="adopt-default: everything made before keys were turned on lives in the default workspace "
        f"({DEFAULT_WORKSPACE}); this makes a key of it (shown once), and with --rename names it.",
    )
    workspaces.add_argument("action", choices=["create", "list", "update", "adopt-default"])
    workspaces.add_argument("name", nargs="?", help="create: the name; update: the workspace id")
    workspaces.add_argument("--rename", help="update, adopt-default: a new name")
    workspaces.add_argument("--key-name", help="adopt-default: a name for the key (default: adopted)")
    workspaces.add_argument(
        "--quota", action="append", type=_quota, metavar="NAME=VALUE", help=f"update: one of {', '.join(_QUOTAS)}"
    )
    workspaces.add_argument(
        "--network-allow", nargs="*", metavar="HOST:PORT", help="update: the egress allowlist ('none' empties it)"
    )
    _common(workspaces)
    workspaces.set_defaults(func=_workspaces)
    keys = sub.add_parser("keys", help="create, list or revoke workspace keys (operator key)")
    keys.add_argument("action", choices=["create", "list", "revoke"])
    keys.add_argument("target", nargs="?", help="create: the workspace id; list: filter by it; revoke: the key id")
    keys.add_argument("--name", help="create: a name for the key")
    _common(keys)
    keys.set_defaults(func=_keys)
