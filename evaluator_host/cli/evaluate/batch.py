"""``evaluator-host run FILE --data ROWS``: a batch job from the terminal, with or without a server.

The same steps either way: find or create the evaluator (named after the file; a changed
definition becomes a new revision), upload the dataset, start a job, follow it with a
progress bar (rows/s, ETA, failures), optionally stream every result to ``--output``, and
print the aggregate as a table. With ``--target-url`` (and ``--target-model``, ``--prompt`` /
``--prompt-file`` / ``--messages-column``, ``--target-key-secret``, ``--concurrency``, ``--max-calls``,
``--max-tokens-total``) the job first generates each row's outputs with that model (docs/api.md, Model
targets). ``--server URL`` talks HTTP to a running service;
without it the service's components run in this process on the default data dir.

Exit codes: 0 the job succeeded, no more than ``--max-error-rate`` of its rows (default
none) ended in a status other than ``ok``, and the mean score reached ``--fail-under``; 1 the
job failed or was cancelled (a job whose every row errored, ``failed`` with ``AllRowsErrored``, too:
no ``--max-error-rate`` passes a job no row of which ran), too many rows errored, or the mean
score is below ``--fail-under`` (or there is none); 2 the evaluator, dataset or mapping was refused;
130 interrupted (the job is cancelled).

When rows errored, the summary tries the evaluator on a few of the failed rows with each
other column as ``outputs`` and names the ``--map`` that would have made them run. A reference
column (``correct_answer``, ``expected``, ``reference``, ``ground_truth``, ``gold``, ``target``,
``label``) is never suggested: mapped as ``outputs`` the evaluator compares the answer with itself
and every row scores 1.0. Nor is a column that runs but scores every tried row the same unless its
name sounds like a model's answer (a question column ``q``: every row 0.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from evaluator_host.cli.evaluate.judge import Judge, judge_of, with_judge_body
from evaluator_host.cli.evaluate.targets import Local, RefusedError, Remote, Target
from evaluator_host.cli.output import located_error, print_capabilities
from evaluator_host.client import ClientError, ServiceUnreachable
from evaluator_host.errors import EvaluatorHostError

__all__ = ["parse_mapping", "run_batch"]

API_KEY_ENV = "EVALUATOR_HOST_API_KEY"  # the key `run --server` sends when --api-key is not given

_POLL_S = 0.1


def parse_mapping(items: list[str] | None) -> dict[str, Any]:
    """``["outputs=col", "inputs=a,b"]`` → a ``field_mapping`` object."""
    mapping: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or key not in ("outputs", "trace", "inputs", "app_params") or not value:
            raise RefusedError(f"--map {item!r}: use outputs=COL, trace=COL, app_params=COL or inputs=COL,COL")
        mapping[key] = [c for c in value.split(",") if c] if key == "inputs" else value
    return mapping


def model_target(args: argparse.Namespace) -> dict[str, Any] | None:
    """The job's ``target`` from ``--target-url`` and its companions (None without ``--target-url``)."""
    url = getattr(args, "target_url", None)
    if not url:
        if getattr(args, "target_model", None) or getattr(args, "prompt", None) or getattr(args, "prompt_file", None):
            raise RefusedError("--target-model and --prompt need --target-url (the model's API)")
        return None
    if not args.target_model:
        raise RefusedError("--target-url needs --target-model")
    target: dict[str, Any] = {"base_url": url, "model": args.target_model}
    if args.prompt_file:
        target["prompt"] = Path(args.prompt_file).read_text()
    elif args.prompt:
        target["prompt"] = args.prompt
    elif args.messages_column:
        target["messages_column"] = args.messages_column
    else:
        raise RefusedError("--target-url needs --prompt, --prompt-file or --messages-column")
    for name in ("target_key_secret", "concurrency", "max_calls", "max_tokens_total"):
        value = getattr(args, name, None)
        if value is not None:
            target["api_key_secret" if name == "target_key_secret" else name] = value
    return target


def _definition(args: argparse.Namespace, language: str, judge: Judge) -> dict[str, Any]:
    path = Path(args.file)
    body = {
        "name": args.name or path.name,
        "language": language,
        "code": path.read_text(),
        "packages": json.loads(args.packages) if args.packages else None,
        "settings": json.loads(args.settings) if args.settings else {},
    }
    return with_judge_body(body, judge)


def _summary(job: dict[str, Any], console: Console) -> None:
    """The aggregate as a table (errored rows counted apart from rows that returned no value)."""
    aggregate = job.get("aggregate") or {}
    errors = aggregate.get("errors", 0)
    table = Table(title=f"job {job['id']}: {job['status']}")
    columns = [("score", aggregate.get("score"))] + [
        (f"outputs.{k}", v) for k, v in aggregate.get("outputs", {}).items()
    ]
    # names are cut only where the terminal is too narrow for them beside the seven figures
    names = row_names([name for name, _stats in columns], max(_ROW_NAME, console.width - _FIGURES_WIDTH))
    columns = [(names[name], stats) for name, stats in columns]
    for column in ("", "mean", "std", "min", "max", "count", "errors", "no value"):
        if column:
            table.add_column(column, justify="right")
        else:  # never cut by the table: row_names made each short and distinct
            table.add_column(column, justify="left", no_wrap=True, min_width=max(len(n) for n in names.values()))
    for name, stats in columns:
        if stats is None:
            continue
        cells = [stats.get(k) for k in ("mean", "std", "min", "max")]
        no_value = max(stats["nan_count"] - errors, 0)  # an errored row never has a value
        table.add_row(
            name,
            *("" if v is None else f"{v:.4g}" for v in cells),
            str(stats["count"]),
            str(errors),
            str(no_value),
        )
    console.print(table)
    progress = job["progress"]
    rate = job.get("rows_per_s")
    parts = [f"rows {progress['done']:,}/{progress['total']:,}", f"failed {progress['failed']:,}"]
    if aggregate.get("pass_rate") is not None:
        parts.append(f"pass rate {aggregate['pass_rate']:.2%}")
    if rate:
        parts.append(f"{rate:,.0f} rows/s")
    console.print(" · ".join(parts))
    usage = job.get("usage")
    if usage:
        cost = f" · cost ≈ {usage['cost_estimate']:.4g}" if usage.get("cost_estimate") is not None else ""
        console.print(f"model: {usage['calls']:,} calls · {usage['total_tokens']:,} tokens{cost}")
    if job.get("error"):
        console.print(f"[red]{job['error'].get('type')}: {job['error'].get('message')}[/red]")
    for warning in job.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")


_ROW_NAME = 32  # characters of a row's name in the summary table, at least (more where the terminal is wide)
_FIGURES_WIDTH = 70  # what the table's seven figure columns and its borders take of a line


def row_names(names: list[str], width: int = _ROW_NAME) -> dict[str, str]:
    """Each of ``names`` as the summary table shows it: whole when it fits in ``width``, else its head
    (``outputs.``) and its tail around an ellipsis — NeMo's ``outputs.arithmetic-expression.valid_expression``
    and ``…correct_value`` stay told apart, where cutting the end made both ``outputs.arithmetic-e…``.
    Names a shortening would make alike are shown whole."""
    shown: dict[str, str] = {}
    for name in names:
        if len(name) <= width:
            shown[name] = name
            continue
        head = name[: name.index(".") + 1] if "." in name[: width // 2] else ""
        shown[name] = head + "…" + name[-(width - len(head) - 1) :]
    seen: dict[str, int] = {}
    for label in shown.values():
        seen[label] = seen.get(label, 0) + 1
    return {name: label if seen[label] == 1 else name for name, label in shown.items()}


_SAMPLE_ROWS = 5  # failed rows the mapping hint tries each column on
_MAX_CANDIDATES = 20  # columns tried at most
_HINT_BUDGET_S = 20.0  # the hint gives up after this long
_OUTPUT_NAMES = ("output", "answer", "response", "completion", "prediction", "pred", "generat", "model")
_REFERENCE_NAMES = ("correct", "expected", "reference", "ground_truth", "groundtruth", "gold", "target", "label")


def _is_reference(column: str) -> bool:
    """Whether ``column`` is named like the reference answer (what the outputs are compared with)."""
    return any(name in column.lower() for name in _REFERENCE_NAMES)


def _case(row: dict[str, Any], mapping: dict[str, Any], outputs: str) -> dict[str, Any]:
    """The case the job would have built for ``row`` with ``outputs`` mapped to that column."""
    columns = mapping.get("inputs")
    return {
        "inputs": row if columns is None else {c: row.get(c) for c in columns},
        "outputs": row.get(outputs),
        "trace": row.get(mapping.get("trace") or "trace"),
        "app_params": row.get(mapping.get("app_params") or "app_params"),
    }


def _candidates(rows: list[dict[str, Any]], mapping: dict[str, Any], code: str) -> list[str]:
    """Columns to try as ``outputs``, likeliest first: names that sound like a model's output, then
    columns the code does not name (a column the code reads is an input, not the output)."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    taken = {mapping.get("outputs"), mapping.get("trace") or "trace", mapping.get("app_params") or "app_params"}
    columns = [c for c in seen if c not in taken]

    def rank(column: str) -> tuple[bool, bool]:
        named_in_code = re.search(rf"\b{re.escape(column)}\b", code) is not None
        sounds_like_output = any(hint in column.lower() for hint in _OUTPUT_NAMES)
        return (named_in_code, not sounds_like_output)

    return sorted(columns, key=rank)[:_MAX_CANDIDATES]


async def _mapping_hint(target: Target, job: dict[str, Any], code: str) -> str | None:
    """Which ``--map outputs=COLUMN`` would have made the first failed rows run, or what they failed with."""
    failed = [item for item in await target.page(job["id"], 200) if item["result"]["status"] != "ok"]
    failed = failed[:_SAMPLE_ROWS]
    if not failed:
        return None
    mapping = job.get("field_mapping") or {}
    first = failed[0]["result"]
    error = first.get("error") or {}
    reason = f"{error.get('type', first['status'])}: {error.get('message', '')}".strip(": ")
    line = f" (line {error['line']})" if error.get("line") else ""
    if job.get("target"):  # the model's answer is the outputs: no column to map (check the prompt's columns)
        columns = ", ".join(sorted(failed[0]["row"])[:10]) if isinstance(failed[0]["row"], dict) else ""
        return f"row {failed[0]['index']} failed with {reason}{line}" + (
            f"; the row's columns: {columns}" if columns else ""
        )
    likely: list[str] = []  # columns that run and look like an answer (scores that differ, or the name)
    weak: list[str] = []  # columns that run, every tried row scored the same, named like no answer (`q`)
    references: list[str] = []
    for column in _candidates([item["row"] for item in failed], mapping, code):
        if _is_reference(column):
            references.append(column)
            continue
        cases = [_case(item["row"], mapping, column) for item in failed]
        results = await target.evaluate(job["evaluator_id"], job["revision"], cases)
        if all(r["status"] == "ok" for r in results):
            uniform = len({json.dumps(r.get("score")) for r in results}) == 1
            sounds_like_output = any(hint in column.lower() for hint in _OUTPUT_NAMES)
            (weak if uniform and not sounds_like_output else likely).append(column)
    current = mapping.get("outputs")
    was = f"--map outputs={current}" if current else "no --map outputs (outputs = the row's 'outputs' column)"
    if not likely:
        why = []
        if weak:
            why.append(f"{', '.join(weak[:4])} run but score every tried row the same")
        if references:
            why.append(f"{', '.join(references[:4])}: the reference, never the outputs (compared with itself: 1.0)")
        skipped = f" ({'; '.join(why)})" if why else ""
        return (
            f"row {failed[0]['index']} failed with {reason}{line}; no column looks like the model's answer{skipped}: "
            "map the column that holds the model's answer with --map outputs=COLUMN"
        )
    also = f" (also: {', '.join(likely[1:4])})" if len(likely) > 1 else ""
    return (
        f"rows failed with {was}, e.g. row {failed[0]['index']}: {reason}{line}. "
        f"With --map outputs={likely[0]} the first {len(failed)} failed rows run{also}."
    )


async def _follow(target: Target, job: dict[str, Any], console: Console) -> dict[str, Any]:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("failed {task.fields[failed]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("rows", total=job["progress"]["total"] or 1, rate="", failed=0)
        while job["status"] in ("queued", "running"):
            await asyncio.sleep(_POLL_S)
            job = await target.job(job["id"])
            rate = f"{job['rows_per_s']:,.0f} rows/s" if job.get("rows_per_s") else ""
            progress.update(task, completed=job["progress"]["done"], rate=rate, failed=job["progress"]["failed"])
    return job


async def _batch(args: argparse.Namespace, language: str, console: Console, out: Console) -> int:
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    judge = judge_of(args, local=not args.server)
    target: Target = Remote(args.server, key) if args.server else await Local.for_judge(judge)
    job: dict[str, Any] | None = None
    ran = False  # every row has a result: the job succeeded, or failed only because every row errored
    hint: str | None = None
    try:
        evaluator = await target.upsert(_definition(args, language, judge))
        print_capabilities(evaluator.get("capabilities"), console)
        dataset = await target.upload(Path(args.data))
        console.print(
            f"evaluator {evaluator['id']} revision {evaluator['revision']} · dataset {dataset['id']} "
            f"({dataset['row_count']:,} rows)"
        )
        body: dict[str, Any] = {"evaluator_id": evaluator["id"], "revision": evaluator["revision"]}
        body |= {"dataset_id": dataset["id"], "field_mapping": parse_mapping(args.map) or None}
        if args.parallelism:
            body["parallelism"] = args.parallelism
        model = model_target(args)
        if model is not None:
            body["target"] = model
        job = await target.start(body)
        job = await _follow(target, job, console)
        if args.output:
            with open(args.output, "wb") as sink:
                async for chunk in target.results(job["id"]):
                    sink.write(chunk)
        all_errored = (job.get("error") or {}).get("type") == "AllRowsErrored"  # the hint is what such a job needs
        ran = job["status"] == "succeeded" or all_errored
        if ran and job["progress"]["failed"] > args.max_error_rate * job["progress"]["done"]:
            try:
                hint = await asyncio.wait_for(_mapping_hint(target, job, evaluator["code"]), _HINT_BUDGET_S)
            except (TimeoutError, RefusedError, EvaluatorHostError, ClientError, httpx.HTTPError):
                hint = None  # only a hint: never what decides the exit code
    except asyncio.CancelledError:
        if job is not None and job["status"] in ("queued", "running"):
            await target.cancel(job["id"])
        raise
    finally:
        await target.close()
    assert job is not None
    if args.json:
        sys.stdout.write(json.dumps(job, separators=(",", ":")) + "\n")
    else:
        _summary(job, out)
    if hint:
        console.print(f"[yellow]hint:[/yellow] {hint}")
    if not ran:  # failed (but for every row erroring), cancelled or stopped
        return 1
    gate = _gate(args, job, console)
    # a job no row of which ran (AllRowsErrored) is failed: no --max-error-rate makes it pass
    return 1 if all_errored else gate


def _gate(args: argparse.Namespace, job: dict[str, Any], console: Console) -> int:
    """1 when more rows errored than ``--max-error-rate`` allows or the mean is below ``--fail-under``."""
    done, failed = job["progress"]["done"], job["progress"]["failed"]
    share = failed / done if done else 0.0
    if share > args.max_error_rate:
        allowed = f"--max-error-rate {args.max_error_rate:g}" if args.max_error_rate else "pass --max-error-rate"
        console.print(f"[red]{failed:,} of {done:,} rows did not end ok ({share:.1%}); {allowed} to allow some[/red]")
        return 1
    if args.fail_under is not None:
        mean = ((job.get("aggregate") or {}).get("score") or {}).get("mean")
        if mean is None:
            console.print(f"[red]no row has a score, so --fail-under {args.fail_under:g} is not met[/red]")
            return 1
        if mean < args.fail_under:
            console.print(f"[red]mean score {mean:.4g} is below --fail-under {args.fail_under:g}[/red]")
            return 1
    return 0


def run_batch(args: argparse.Namespace, language: str) -> int:
    """Run the ``--data`` mode of ``run``; returns the exit code."""
    console = Console(stderr=True)
    try:
        return asyncio.run(_batch(args, language, console, Console()))
    except KeyboardInterrupt:
        console.print("interrupted: the job was cancelled")
        return 130
    except (RefusedError, EvaluatorHostError) as exc:
        error = exc.error if isinstance(exc, RefusedError) else {"type": exc.type_name, **exc.fields()}
        if error.get("line"):  # the definition's error at its place in the file
            code = Path(args.file).read_text(errors="replace")
            message = exc.message if isinstance(exc, EvaluatorHostError) else str(error.get("message", exc))
            text = located_error(args.file, code, str(error.get("type")), message, error["line"], error.get("column"))
            console.print(text, style="red", markup=False, highlight=False, soft_wrap=True)
            return 2
        message = exc.message if isinstance(exc, EvaluatorHostError) else str(exc)
        name = type(exc).__name__ if isinstance(exc, EvaluatorHostError) else "refused"
        console.print(f"[red]{name}: {message}[/red]")
        return 2
    except ServiceUnreachable as exc:  # nothing answered: say where it looked
        console.print(
            f"[red]{exc}; is it running (`evaluator-host serve`), and is this its URL?[/red]", highlight=False
        )
        return 1
    except (ClientError, httpx.HTTPError, OSError, ValueError) as exc:
        console.print(f"[red]{type(exc).__name__}: {exc}[/red]")
        return 1
