"""The order the test files are handed out in: the heaviest first, so the parallel tier ends together.

``make test``'s parallel tier (``tests/tiers.py``) gives whole files to its workers (``--dist loadfile``: a
module's fixtures, e.g. one started service, are made once), one at a time as each worker gets free, in
collection order. A long file handed out last would run alone at
the end while the other workers idle; so the files below (the longest in a measured run: seconds of their
tests' calls, setup included where a module fixture builds something) go first, in this order, and every
other file follows in its usual order.

Only the order depends on this list, never a result: a stale or missing entry costs minutes, not
correctness (``tests/unit/test_schedule.py`` checks each names a file that exists). Refresh it from a
run's ``--durations`` when the tail grows.

A shuffled run (``-p randomly``) gets a seed chosen here and printed (:func:`shuffled_with_a_seed`): under ``-q``
pytest does not show the one pytest-randomly would choose, and an order that failed must be repeatable.
"""

from __future__ import annotations

import random
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# measured: the seconds of each file's tests (setup, call, teardown) in one process, from the parallel tier's
# JUnit XML of a quiet ``.ci/run`` (commit b91ae8b, 2026-11-26; for ranking only)
HEAVY: tuple[str, ...] = (
    "queue/test_distributed.py",  # 132 s
    "packaging/test_image.py",  # 114 s
    "faults/test_job_adoption.py",  # 95 s
    "api/test_async_evaluators.py",  # 91 s
    "test_cli.py",  # 77 s
    "compliance/test_three_languages.py",  # 76 s
    "online/test_decisions.py",  # 75 s
    "test_cli_lock_replay.py",  # 64 s
    "api/test_fuzz.py",  # 64 s
    "packaging/test_wheel.py",  # 63 s
    "online/test_backfill.py",  # 63 s
    "online/test_model_calls.py",  # 56 s
    "api/test_jobs.py",  # 54 s
    "sandbox/test_build_sandbox.py",  # 51 s
    "sandbox/test_docker.py",  # 50 s
    "online/test_cli_rules.py",  # 49 s
    "online/test_sinks_jobs.py",  # 43 s
    "jobs/test_resume.py",  # 40 s
    "online/test_shadow.py",  # 39 s
    "online/test_sinks_langfuse.py",  # 37 s
    "test_cli_test.py",  # 37 s
    "online/test_sinks_phoenix.py",  # 36 s
    "web/test_online.py",  # 34 s
    "online/test_session_level.py",  # 33 s
    "api/test_admission.py",  # 33 s
    "compliance/test_restricted.py",  # 32 s
    "runtimes/test_nemo_real.py",  # 31 s
    "targets/test_target_jobs.py",  # 30 s
    "compliance/test_hostile.py",  # 29 s
    "migrate/test_differential.py",  # 28 s
    "faults/test_workers.py",  # 28 s
    "compliance/test_escapes.py",  # 28 s
    "online/test_receiver.py",  # 27 s
    "cli/test_review_cli.py",  # 27 s
    "store/test_jobs_store.py",  # 26 s
    "api/test_tracing.py",  # 26 s
    "api/test_shared_bucket.py",  # 26 s
    "faults/test_idempotency_killed_replica.py",  # 25 s
    "test_cli_admin.py",  # 24 s
    "web/test_online_levels.py",  # 24 s
    "online/test_budgets.py",  # 24 s
    "sandbox/test_pool.py",  # 24 s
    "test_cli_db.py",  # 23 s
    "online/test_sinks_mlflow.py",  # 19 s
    "targets/test_target_trust.py",  # 18 s
    "runtimes/test_package_store.py",  # 17 s
    "test_cli_judge.py",  # 17 s
)

_RANK = {name: rank for rank, name in enumerate(HEAVY)}


def _name(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None


def rank(path: Path) -> int:
    """The file's place in the hand-out order: its index in :data:`HEAVY`, or after all of them."""
    name = _name(path)
    return len(HEAVY) if name is None else _RANK.get(name, len(HEAVY))


def worker_args(workers: int) -> list[str]:
    """pytest's arguments for ``workers`` xdist processes: none for one (no xdist at all).

    ``--dist loadfile``, not ``loadgroup`` with a group a file: pytest-xdist 3.8 tells a test's group by
    rewriting its node id, which pytest 9 no longer reads (pytest-dev/pytest-xdist#1386), so under
    ``loadgroup`` every test was handed out alone and a file's module fixtures were made once in each worker,
    at the same time (two builds of the service image raced on ``dist/wheelhouse``)."""
    return ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []


def shuffled_with_a_seed(args: list[str]) -> list[str]:
    """``args`` with ``--randomly-seed=N`` added and printed when they ask pytest-randomly to shuffle (``-p randomly``)
    without a seed: pytest's header, which names the seed pytest-randomly chose, is not shown under ``-q``, and an
    order that failed must be repeatable. Both tiers get the same seed."""
    shuffles = any(a == "randomly" and b == "-p" for b, a in zip(args, args[1:], strict=False)) or "-prandomly" in args
    if not shuffles or any(a.startswith("--randomly-seed") for a in args):
        return args
    seed = random.SystemRandom().randrange(10**9)
    print(f"== shuffled: -p randomly --randomly-seed={seed} repeats this order", flush=True)
    return [*args, f"--randomly-seed={seed}"]
