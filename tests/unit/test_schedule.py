"""``make test``'s tiers: the hand-out order names real files, and a run that ran no test is not a success."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cpu import file_cpu
from tests.support.schedule import HEAVY, TESTS, rank, shuffled_with_a_seed, worker_args
from tests.support.timings import failures, file_seconds

# The inner pytest runs below prove what tests/tiers.py and schedule.worker_args do with a pytest run, on small
# test files of their own in tmp_path: outside tests/, so tests/conftest.py (the whole app) is not imported, and
# with the plugins pytest finds installed not loaded (hypothesis, schemathesis...: about 1.5 s of CPU a process,
# and a tier starts up to two); xdist, which the tier's arguments need, is named instead.
NO_AUTOLOAD = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _test_file(folder: Path, name: str, *tests: str) -> Path:
    """A test file ``name`` in ``folder`` with a passing test of each name in ``tests``."""
    path = folder / name
    path.write_text("".join(f"def {test}():\n    pass\n\n\n" for test in tests))
    return path


def test_every_heavy_file_exists_once_and_ranks_before_the_others() -> None:
    assert len(set(HEAVY)) == len(HEAVY)
    missing = [name for name in HEAVY if not (TESTS / name).is_file()]
    assert not missing, f"tests/support/schedule.py names files that do not exist: {missing}"
    assert [rank(TESTS / name) for name in HEAVY] == list(range(len(HEAVY)))
    assert rank(TESTS / "unit" / "test_schedule.py") == len(HEAVY)


def test_two_workers_are_handed_whole_files(tmp_path: Path) -> None:
    """The tier's own xdist arguments (``schedule.worker_args``) on two files of several tests: each file's tests
    all ran on one worker, so a module's fixture (a started service, a built image) is made once, never twice at
    once."""
    files = [_test_file(tmp_path, "test_one.py", "test_a", "test_b", "test_c").name]
    files.append(_test_file(tmp_path, "test_two.py", "test_d", "test_e").name)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", *worker_args(2), "-v", "-p", "no:cacheprovider", *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=NO_AUTOLOAD,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED ([^:\s]+)::", done.stdout, re.M)
    workers_of = {path: {worker for worker, ran_path in ran if ran_path == path} for path in files}
    assert all(ran_path in files for _, ran_path in ran) and len(ran) == 5, done.stdout
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of


def _tiers(*pytest_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.tiers", "--workers", "1", "--", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=NO_AUTOLOAD,
    )


def test_a_selection_in_one_tier_passes_and_says_the_other_selected_nothing(tmp_path: Path) -> None:
    done = _tiers(str(_test_file(tmp_path, "test_passes.py", "test_passes")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== tier parallel: passed" in done.stdout
    assert "== tier serial: no test selected" in done.stdout


def test_a_run_where_no_tier_ran_a_test_fails(tmp_path: Path) -> None:
    done = _tiers(str(_test_file(tmp_path, "test_passes.py", "test_passes")), "-k", "no_test_has_this_name")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "no test ran in any tier: nothing was checked" in done.stdout


def test_a_failing_tier_fails_the_run(tmp_path: Path) -> None:
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert 1 == 2\n")
    done = _tiers(str(failing))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "== tier parallel: FAILED (exit 1)" in done.stdout
    # the failed test and its error, after the tiers' verdicts (a long traceback hides it above)
    tail = done.stdout.split("== tier parallel: FAILED (exit 1)")[1]
    assert "failed: " in tail and "test_fails.py::test_fails" in tail and "assert 1 == 2" in tail, tail


def test_the_time_of_a_tier_is_summed_per_file_across_classes_and_parameters() -> None:
    report = """<testsuites><testsuite>
    <testcase classname="tests.api.test_jobs" name="test_a[process]" time="1.5"/>
    <testcase classname="tests.api.test_jobs" name="test_a[docker]" time="2.5"/>
    <testcase classname="tests.api.test_jobs.TestPages" name="test_b" time="1"/>
    <testcase classname="tests.test_cli" name="test_c" time="0.25"/>
    </testsuite></testsuites>"""
    assert file_seconds(report) == {"tests/api/test_jobs.py": 5.0, "tests/test_cli.py": 0.25}


def test_a_failure_is_named_with_its_error_in_a_line_and_a_long_one_is_cut() -> None:
    report = f"""<testsuites><testsuite>
    <testcase classname="tests.api.test_jobs" name="test_a" time="1"/>
    <testcase classname="tests.api.test_jobs.TestPages" name="test_b[x]" time="1">
      <failure message="BackendUnavailable: the sandbox uid cannot read /x">long
traceback</failure></testcase>
    <testcase classname="tests.test_cli" name="test_c" time="1"><error>setup
    RuntimeError: {"y" * 900}
    </error></testcase>
    </testsuite></testsuites>"""
    found = failures(report)
    assert found[0] == (
        "tests/api/test_jobs.py::TestPages::test_b[x]",
        "BackendUnavailable: the sandbox uid cannot read /x",
    )
    assert found[1][0] == "tests/test_cli.py::test_c" and found[1][1].startswith("RuntimeError: yyy")
    assert len(found[1][1]) == 401 and found[1][1].endswith("…") and len(found) == 2


def test_a_tier_prints_the_cpu_its_files_cost(tmp_path: Path) -> None:
    """Each pytest process of a tier writes its CPU per file; the tier sums them and prints the costliest."""
    spinning = tmp_path / "test_spins.py"
    spinning.write_text(
        "import time\n\n\ndef test_spins():\n    end = time.process_time() + 0.3\n"
        "    while time.process_time() < end:\n        pass\n"
    )
    kept = tmp_path / "timings"
    done = subprocess.run(
        [sys.executable, "-m", "tests.tiers", "--workers", "1", "--", "-q", "-p", "no:cacheprovider", str(spinning)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**NO_AUTOLOAD, "TEST_TIMINGS_DIR": str(kept)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    spent = file_cpu(kept / "parallel-cpu")
    assert len(spent) == 1 and next(iter(spent.values())) >= 0.3, spent
    assert "== tier parallel: " in done.stdout and "costliest files (seconds of CPU)" in done.stdout


def test_a_shuffled_run_names_its_seed_and_gives_both_tiers_the_same_one(capsys: pytest.CaptureFixture[str]) -> None:
    args = shuffled_with_a_seed(["-q", "-p", "randomly", "-p", "no:cacheprovider"])
    seed = [a for a in args if a.startswith("--randomly-seed=")]
    assert len(seed) == 1 and args[:5] == ["-q", "-p", "randomly", "-p", "no:cacheprovider"]
    assert seed[0] in capsys.readouterr().out  # printed: the order can be repeated
    assert shuffled_with_a_seed(["-q", "-p", "no:randomly"]) == ["-q", "-p", "no:randomly"]  # not shuffled: no seed
    given = ["-p", "randomly", "--randomly-seed=5"]
    assert shuffled_with_a_seed(given) == given  # the caller's seed kept
