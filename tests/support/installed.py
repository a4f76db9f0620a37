"""The distribution as users get it: built (sdist, then the wheel from the sdist), installed into a fresh venv
outside the checkout, and its ``evaluator-host serve`` started from there; plain HTTP calls to it.

- :func:`build_dist` builds with the pinned tools of ``make dist`` (``python -m build --no-isolation``) in a
  tools venv of its own, the outputs in a temporary folder; :func:`run_dist` is the test run's one build of it
  (tests/packaging/test_wheel.py and test_image.py both install the same checkout's wheel: built once);
- :func:`install` makes a fresh venv and installs the wheel with uv, its dependencies held to the versions of
  ``requirements.lock`` (:func:`lock_constraints`): ``uv pip install``, one of the install paths docs/deploy.md
  gives users, as ``make install`` does (pip only when uv cannot reach the packages: uv reads no pip.conf). pip's
  install of the same wheel is the service image's (``deploy/Dockerfile``, tests/packaging/test_image.py). Here uv
  took 18 s of CPU and 27 s against pip's 74 s and 149 s (its venv's own pip included), the bytecode compiled by both;
- :func:`serving_installed` starts the venv's own ``evaluator-host`` with the checkout nowhere on its paths
  (cwd and ``HOME`` in the temporary folder, no ``PYTHONPATH``), healthy, terminated afterwards;
- :func:`call` is one JSON request over ``urllib`` (no client library).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support import REPO
from tests.support.service import free_port
from tests.support.wait import wait_until

BUILD_TOOLS = ("build==1.6.1", "setuptools==84.0.0")  # the Makefile's BUILD_TOOLS
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?==[^\s\\;]+(?:\s*;[^\\]*)?)")


def lock_constraints(lock: Path = REPO / "requirements.lock") -> str:
    """requirements.lock as a pip constraints file: its ``name==version ; marker`` lines, hashes dropped."""
    pins = [m.group(1).strip() for line in lock.read_text().splitlines() if (m := _PIN.match(line))]
    return "\n".join(re.sub(r"\[[^\]]*\]", "", pin) for pin in pins) + "\n"


def _venv(path: Path, pip: bool = True) -> Path:
    """A fresh venv at ``path`` (with pip, or ``pip=False`` without); its bin folder."""
    without = [] if pip else ["--without-pip"]
    subprocess.run([sys.executable, "-m", "venv", *without, str(path)], check=True, timeout=300)
    return path / "bin"


# the wheel's entries dated alike at every build (the reproducible-builds variable: 1980-01-01, zip's first
# date): a checkout's wheel is then the same bytes run after run, and deploy/build.sh's image build finds its
# install layer in the engine's build cache instead of installing the wheelhouse again (a minute or more here)
SOURCE_DATE_EPOCH = "315532800"


def build_dist(out: Path) -> tuple[Path, Path]:
    """The sdist and the wheel (built from the sdist) of the checkout, in ``out``; the wheel byte-identical for
    an unchanged package (:data:`SOURCE_DATE_EPOCH`)."""
    tools = _venv(out / "tools")
    subprocess.run([tools / "pip", "install", "--quiet", *BUILD_TOOLS], check=True, timeout=600)
    dist = out / "dist"
    subprocess.run(
        [tools / "python", "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        timeout=600,
        capture_output=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH},
    )
    (sdist,) = dist.glob("evaluator_host-*.tar.gz")
    (wheel,) = dist.glob("evaluator_host-*.whl")
    return sdist, wheel


def run_dist(basetemp: Path) -> tuple[Path, Path]:
    """The sdist and wheel of :func:`build_dist`, built once for the test run: in ``basetemp`` (the session's
    ``tmp_path_factory.getbasetemp()``), or under pytest-xdist in a folder of its parent that every worker of this
    run names alike (``PYTEST_XDIST_TESTRUNUID``), the first worker building while a file lock holds the others.
    The checkout does not change during a run, so each asker gets what it would have built (about 8 s of CPU
    each); they only read it (a zip listing, ``pip install``, ``deploy/build.sh`` copies it)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    root = basetemp.parent / f"dist-{run}" if run else basetemp / "dist-of-the-run"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".built").exists():
            build_dist(root)
            (root / ".built").write_text("")
    (sdist,) = (root / "dist").glob("evaluator_host-*.tar.gz")
    (wheel,) = (root / "dist").glob("evaluator_host-*.whl")
    return sdist, wheel


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv at ``venv`` with ``wheel`` installed (dependencies at the lock's versions, their bytecode
    compiled); its bin folder. By the checkout's uv (the lock's pin), or by pip in the venv when uv fails."""
    bin_dir = _venv(venv, pip=False)
    constraints = venv.parent / "constraints.txt"
    constraints.write_text(lock_constraints())
    uv = Path(sys.executable).parent / "uv"
    by_uv = [uv, "pip", "install", "--python", bin_dir / "python", "--native-tls", "--compile-bytecode", "--quiet"]
    if not uv.is_file() or subprocess.run([*by_uv, "-c", constraints, wheel], timeout=900, cwd=venv.parent).returncode:
        subprocess.run([bin_dir / "python", "-m", "ensurepip", "--upgrade"], check=True, timeout=300)
        by_pip = [bin_dir / "pip", "install", "--quiet", "-c", constraints, wheel]
        subprocess.run(by_pip, check=True, timeout=900, cwd=venv.parent)
    return bin_dir


def clean_env(home: Path, bin_dir: Path, **settings: str) -> dict[str, str]:
    """An environment with nothing of the checkout's: the venv's bin first on PATH, no PYTHONPATH."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("EVALUATOR_HOST_")}
    env.update(HOME=str(home), PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", **settings)
    return env


def call(base: str, method: str, path: str, body: Any = None, timeout: float = 120) -> Any:
    """One JSON request; the decoded answer (an HTTP error raises with its body in the message)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:2000]!r}") from None
    return json.loads(raw) if raw else None


COLD_INSPECTOR = "the parser gave up"  # js_inspect.py's answer when its Node did not start within its 5 s bound


def evaluate_retrying_a_cold_start(send: Callable[[], Any], tries: int = 3) -> Any:
    """``send()`` (one evaluation), sent again (at most ``tries`` times) only while the answer is the JS/TS
    inspector's cold start running out of its 5 s bound: a fresh Node's first start on a machine under heavy
    load (other suites) can take longer; any other answer, good or bad, is returned as it is."""
    for _ in range(tries - 1):
        try:
            return send()
        except AssertionError as exc:
            if COLD_INSPECTOR not in str(exc):
                raise
    return send()


def get_text(base: str, path: str) -> tuple[int, str, str]:
    """``GET path``: status, content type and body text."""
    with urllib.request.urlopen(base + path, timeout=60) as response:  # noqa: S310 - loopback only
        return response.status, response.headers.get("content-type", ""), response.read().decode()


@contextlib.contextmanager
def serving_installed(bin_dir: Path, home: Path, **settings: str) -> Iterator[str]:
    """The installed ``evaluator-host serve`` (settings as ``EVALUATOR_HOST_*`` values), healthy: its base URL."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = clean_env(home, bin_dir, EVALUATOR_HOST_DATA_DIR=str(home / "data"), **settings)
    argv = [str(bin_dir / "evaluator-host"), "serve", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=home, env=env)
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            assert proc.poll() is None, f"the service exited with {proc.returncode}"
            return bool(call(base, "GET", "/healthz", timeout=5)["status"] == "ok")

        wait_until(healthy, 120, 0.2, what="the installed service to start", ignoring=(OSError,))
        yield base
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
