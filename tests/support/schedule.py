"""The order the test files are handed out in: the heaviest first, so the parallel tier ends together.

``make test``'s parallel tier (``tests/tiers.py``) gives whole files to its workers (``--dist loadgroup``
with one group a file, :func:`group`: a module's fixtures, e.g. one started service, are made once), one
at a time as each worker gets free, in collection order. A long file handed out last would run alone at
the end while the other workers idle; so the files below (the longest in a measured run: seconds of their
tests' calls, setup included where a module fixture builds something) go first, in this order, and every
other file follows in its usual order.

Only the order depends on this list, never a result: a stale or missing entry costs minutes, not
correctness (``tests/unit/test_schedule.py`` checks each names a file that exists). Refresh it from a
run's ``--durations`` when the tail grows.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# measured: ``make test`` with 4 workers on the 2-core machine, loaded (seconds are for ranking only)
HEAVY: tuple[str, ...] = (
    "test_cli_lock_replay.py",  # 434 s
    "test_cli.py",  # 305 s
    "packaging/test_image.py",  # 279 s
    "online/test_cli_rules.py",  # 251 s
    "online/test_decisions.py",  # 170 s (measured alone on the loaded machine, like the six below)
    "online/test_sinks_mlflow.py",  # 115 s (a real MLflow server; its venv installed once)
    "online/test_session_level.py",  # ~100 s
    "online/test_budgets.py",  # 95 s
    "online/test_sinks_phoenix.py",  # 93 s (a real Phoenix server; its venv installed once)
    "online/test_sinks_jobs.py",  # ~80 s (Langfuse stand-in on 2 databases and docker, a real Phoenix server)
    "online/test_backfill.py",  # ~60 s
    "online/test_forwarding.py",  # 59 s
    "test_cli_test.py",  # 242 s
    "test_cli_admin.py",  # 240 s
    "queue/test_distributed.py",  # 216 s
    "faults/test_job_adoption.py",  # ~120 s alone (two replicas started per test, 8 tests)
    "packaging/test_wheel.py",  # 214 s
    "compliance/test_restricted.py",  # 192 s
    "api/test_async_evaluators.py",  # 192 s
    "sandbox/test_build_sandbox.py",  # 172 s
    "sandbox/test_docker.py",  # 165 s
    "api/test_jobs.py",  # 162 s
    "migrate/test_differential.py",  # 158 s
    "compliance/test_three_languages.py",  # 157 s
    "test_cli_db.py",  # 140 s
    "jobs/test_resume.py",  # 136 s
    "runtimes/test_nemo_real.py",  # 130 s
    "compliance/test_escapes.py",  # 116 s
    "runtimes/test_prune.py",  # 115 s
    "sandbox/test_install_locations.py",  # 105 s
    "compliance/test_hostile.py",  # 102 s
    "api/test_fuzz.py",  # 97 s
    "online/test_sdk_export.py",  # 89 s
    "test_cli_judge.py",  # 86 s
    "api/test_tracing.py",  # 82 s
    "test_cli_migrate.py",  # 76 s
    "faults/test_workers.py",  # 72 s
    "test_cli_errors.py",  # 63 s
    "cli/test_runtimes_pins.py",  # 60 s
    "conformance/test_vectors.py",  # 58 s
    "api/test_nesting.py",  # 57 s
    "sandbox/test_build_disk.py",  # 56 s
    "queue/test_forged_tasks.py",  # 53 s
    "sandbox/test_builder.py",  # 53 s
    "cli/test_readme_walkthrough.py",  # 52 s
)

# Heavy files whose tests share nothing but the session (no module-scoped fixture: each test starts its own
# service or runs its own CLI): handed out one test at a time, so their tests run side by side instead of one
# after another on a single worker (``group``). A module fixture added to one of them would be made once per
# worker that runs one of its tests: correct, only slower.
SPLIT: frozenset[str] = frozenset(
    {
        "test_cli_lock_replay.py",
        "test_cli.py",
        "online/test_cli_rules.py",
        "test_cli_test.py",
        "test_cli_admin.py",
        "online/test_decisions.py",
        "online/test_budgets.py",
    }
)

_RANK = {name: rank for rank, name in enumerate(HEAVY)}


def _name(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None


def group(path: Path, nodeid: str) -> str:
    """The unit a worker is handed (``--dist loadgroup``): the test itself in a :data:`SPLIT` file, else its file."""
    name = _name(path)
    return nodeid if name in SPLIT else (name or str(path))


def rank(path: Path) -> int:
    """The file's place in the hand-out order: its index in :data:`HEAVY`, or after all of them."""
    name = _name(path)
    return len(HEAVY) if name is None else _RANK.get(name, len(HEAVY))
