"""Reading a service's Prometheus exposition (``GET /metrics``) in tests."""

from __future__ import annotations

import re

__all__ = ["sample"]


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the first sample ``name`` of the exposition ``text`` whose labels include ``labels`` (in any
    order: the exposition sorts them), 0 when none does."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(2))
    return 0.0
