"""``evaluator-host results replay JOB_ID INDEX``: a stored result run again on a service, compared.

Contract: asks the service at ``--server`` (default ``http://HOST:PORT`` of the settings; ``--api-key``,
default ``EVALUATOR_HOST_API_KEY``) for ``POST /v1/results/replay`` of row ``INDEX`` of job ``JOB_ID``
(the job's exact revision and runtime, the row's case as the job mapped it; never answered from the result
cache). Prints ``identical`` or each field that differs (``--json``: the service's whole answer). Exit
status: 0 when the answer is the stored one, 1 when it differs, 2 for a usage error (a job or row not
found, a service it cannot reach) — so a CI step can require a result to reproduce.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from evaluator_host.cli.remote import dumped, service_client, usage_errors

__all__ = ["add_parser", "run_results"]


def run_results(args: argparse.Namespace) -> int:
    """The ``results`` command (one action: ``replay``)."""
    key = args.api_key or os.environ.get("EVALUATOR_HOST_API_KEY")
    with service_client(args.server, key) as client, usage_errors():
        replay = client.replay_result(args.job_id, args.index)
    if args.json:
        sys.stdout.write(json.dumps(dumped(replay), separators=(",", ":")) + "\n")
    else:
        head = (
            f"job {replay.job_id} row {replay.index}: evaluator {replay.evaluator_id} revision {replay.revision} "
            f"on runtime {replay.runtime_id}"
        )
        verdict = ["identical"] if replay.identical else ["differs", *(f"  {line}" for line in replay.differences)]
        sys.stdout.write("\n".join([head, *verdict]) + "\n")
    return 0 if replay.identical else 1


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``results`` and its options."""
    results = sub.add_parser("results", help="replay a stored job result on a service and compare the answer")
    results.add_argument("action", choices=["replay"])
    results.add_argument("job_id", help="the job whose row to run again")
    results.add_argument("index", type=int, help="the row's index in the job (0-based)")
    results.add_argument("--server", help="URL of the service (default: http://HOST:PORT of the settings)")
    results.add_argument("--api-key", help="bearer key (default: EVALUATOR_HOST_API_KEY)")
    results.add_argument("--json", action="store_true", help="print the service's whole answer as JSON")
    results.set_defaults(func=run_results)
