"""docs/client.md's Python examples, run in order as one script against the real service (its URL and
a workspace key in the environment, as the guide says). A block that needs pandas is skipped without it."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.support import REPO
from tests.support.client import Live


def test_the_client_guide_s_examples_run(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALUATOR_HOST_URL", live.url)
    monkeypatch.setenv("EVALUATOR_HOST_API_KEY", live.key)
    blocks = re.findall(r"^```python\n(.*?)^```$", (REPO / "docs" / "client.md").read_text(), re.M | re.S)
    assert len(blocks) >= 8
    has_pandas = importlib.util.find_spec("pandas") is not None
    namespace: dict[str, object] = {"__name__": "client_guide"}
    for number, block in enumerate(blocks, 1):
        if "# needs pandas" in block and not has_pandas:
            continue
        exec(compile(block, f"docs/client.md block {number}", "exec"), namespace)  # noqa: S102 - the guide's own code
