"""Backend selection follows the setting; it never silently substitutes another backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator_host.errors import BackendUnavailable
from evaluator_host.services import select_backend
from tests.conftest import make_settings


def test_auto_and_process_select_the_process_backend(tmp_path: Path) -> None:
    for name in ("auto", "process"):
        assert select_backend(make_settings(tmp_path, backend=name)).name == "process"


def test_an_unavailable_backend_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable):
        select_backend(make_settings(tmp_path, backend="docker"))
