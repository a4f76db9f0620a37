"""Where a test run's time went: seconds per test file from pytest's JUnit XML (``tests/tiers.py`` prints
each tier's slowest files with it)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections import Counter


def file_seconds(junit_xml: str) -> Counter[str]:
    """Seconds per test file in a JUnit XML report (pytest's ``classname`` is the file's dotted path, then
    any class: ``tests.api.test_jobs`` or ``tests.api.test_jobs.TestX``), summed over its test cases."""
    totals: Counter[str] = Counter()
    for case in ElementTree.fromstring(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        while len(parts) > 1 and parts[-1][:1].isupper():  # a test class, not a module
            parts.pop()
        totals["/".join(parts) + ".py"] += float(case.get("time", "0") or 0)
    return totals
