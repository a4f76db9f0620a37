"""Throwaway venvs for third-party servers the tests start (Phoenix, MLflow), never in the project's lock.

:func:`tool_venv` installs one pinned requirement once into a venv of its own, cached under the given
environment variable's path or ``~/.cache/evaluator-host-tests/<name>-<version>``; a file lock makes parallel
test processes (the xdist workers of ``make test``) install it once, and a finished install leaves
``.installed`` (what was installed and how long it took). The install uses uv (pinned, put into the venv by
pip first: resolving and downloading ~850 MB in parallel took 16 s where pip took about 220 s on the 2-core
machine), trusting the system's certificate store (``UV_NATIVE_TLS``: the TLS-intercepting proxy's CA is there).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["UV", "tool_venv"]

UV = "uv==0.13.9"  # the Makefile's UV_VERSION


def tool_venv(name: str, version: str, requirement: str, env_var: str) -> Path:
    """The venv holding ``requirement`` (installed on first use, under ``$env_var`` when set)."""
    given = os.environ.get(env_var)
    root = Path(given) if given else Path.home() / ".cache" / "evaluator-host-tests" / f"{name}-{version}"
    if (root / ".installed").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".installed").exists():
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
            bin_dir = root / "bin"
            subprocess.run([str(bin_dir / "pip"), "install", "--quiet", UV], check=True, timeout=600)
            subprocess.run(
                [str(bin_dir / "uv"), "pip", "install", "--quiet", "--python", str(bin_dir / "python"), requirement],
                check=True,
                timeout=1800,
                env={**os.environ, "UV_NATIVE_TLS": "1"},
            )
            (root / ".installed").write_text(f"{requirement} in {time.monotonic() - started:.0f} s\n")
    return root
