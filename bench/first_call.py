"""A saved evaluator's first call right after its save: what a user who saves and then runs an evaluator sees.

Saving a revision pre-warms a worker for it (its code loaded, its imports done); a call that comes while that
start is still under way waits for it instead of starting a second worker for the key (docs/architecture.md,
decision 6). Measured here, per backend: a service, one evaluator importing ``numpy`` saved once (its runtime
built), then ``--revisions`` times: save a new revision and call it by id at once, ``--gap`` seconds apart. The
figures: the first calls' p50 in ms, and the workers the pool holds after them (one per revision is the goal; two
per revision is a second start per save).

    PYTHONPATH=. .venv/bin/python -m bench.first_call [--revisions 10] [--runs 2] [--tree LABEL=PATH ...]

Each ``--tree`` is a checkout whose package the service imports (``PYTHONPATH``, ``cwd``); none: this one. The
trees take turns, so a neighbour's burst on a shared machine falls on each alike.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import httpx

from bench.common import pct, serving, tree_parser, trees_of

CODE = (
    "import numpy as np\n\n\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': float(np.mean([1.0, 1.0]))}\n"
)
PINS = {"numpy": "2.1.3"}


def first_calls(tree: str, backend: str, revisions: int, gap_s: float) -> tuple[list[float], int]:
    """The first calls' latencies in ms, and the pool's workers after them, for one fresh service of ``tree``."""
    with tempfile.TemporaryDirectory(prefix="evaluator-host-first-") as data_dir:
        env = {"PYTHONPATH": tree, "EVALUATOR_HOST_BACKEND": backend}
        with serving(data_dir, env, cwd=tree) as (base, _proc), httpx.Client(base_url=base, timeout=120) as http:
            body = {"name": "first", "language": "python", "code": CODE, "packages": PINS}
            saved = http.post("/v1/evaluators", json=body)
            if saved.status_code != 201:
                raise RuntimeError(f"the evaluator was not saved: {saved.status_code} {saved.text}")
            time.sleep(3 * gap_s)  # its runtime built and its own pre-warm done
            latencies = []
            for _ in range(revisions):
                made = http.post("/v1/evaluators", json={**body, "code": f"# {time.time_ns()}\n{CODE}"})
                if made.status_code != 201:
                    raise RuntimeError(f"a revision was not saved: {made.status_code} {made.text}")
                start = time.perf_counter()
                answer = http.post(f"/v1/evaluators/{made.json()['id']}/evaluate", json={"inputs": {}})
                latencies.append((time.perf_counter() - start) * 1000)
                if answer.status_code != 200 or answer.json().get("status") != "ok":
                    raise RuntimeError(f"the first call failed: {answer.status_code} {answer.text}")
                time.sleep(gap_s)
            workers = int(http.get("/healthz").json()["workers"]["total"])
    return latencies, workers


def measure(
    trees: dict[str, str] | None = None, backends: tuple[str, ...] = ("process",), runs: int = 2, revisions: int = 10
) -> dict[str, dict[str, list[tuple[float, int]]]]:
    """{backend: {tree label: [(p50 ms, workers), one per run]}}, the trees taking turns."""
    trees = trees or trees_of([])
    figures: dict[str, dict[str, list[tuple[float, int]]]] = {b: {t: [] for t in trees} for b in backends}
    for backend in backends:
        for _ in range(runs):
            for label, tree in trees.items():
                latencies, workers = first_calls(tree, backend, revisions, 1.5)
                figures[backend][label].append((pct(latencies, 50), workers))
    return figures


def table(figures: dict[str, dict[str, list[tuple[float, int]]]], revisions: int = 10) -> str:
    trees = list(next(iter(figures.values())))
    head = " | ".join(f"{t}: first call p50 ms (runs) | {t}: workers after" for t in trees)
    lines = [f"| backend | {head} |", "|---|" + "---|---|" * len(trees)]
    for backend, per_tree in figures.items():
        cells = []
        for runs in per_tree.values():
            p50s = [p for p, _ in runs]
            cells.append(f"{statistics.median(p50s):.0f} ({', '.join(f'{p:.0f}' for p in p50s)})")
            cells.append(f"{max(w for _, w in runs)} (of {revisions + 1} revisions)")
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(figures: dict[str, dict[str, list[tuple[float, int]]]], load: float) -> str:
    """The docs/benchmarks.md section."""
    return (
        "\n## A saved evaluator's first call\n\n"
        "`bench/first_call.py`: a service, one evaluator importing `numpy` saved once, then 10 times: a new revision "
        "saved and called by id at once, 1.5 s apart. The call waits for the revision's pre-warm under way instead "
        f"of starting a second worker. Load average at the start: {load:.1f}.\n\n" + table(figures) + "\n"
    )


def main() -> None:
    parser = tree_parser(__doc__)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--revisions", type=int, default=10)
    parser.add_argument("--backend", action="append", default=[], choices=["process", "docker"])
    args = parser.parse_args()
    trees = trees_of(args.tree)
    load = os.getloadavg()[0]
    figures = measure(trees, tuple(args.backend) or ("process",), args.runs, args.revisions)
    print(f"load average (1 min) at the start: {load:.1f}")
    print(table(figures, args.revisions))


if __name__ == "__main__":
    main()
