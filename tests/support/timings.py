"""Where a test run's time went, and what failed: from pytest's JUnit XML (``tests/tiers.py`` prints each
tier's slowest files with it, and, last of all, each failed test and its error in a line)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections import Counter


def _file_and_classes(classname: str) -> tuple[str, list[str]]:
    """pytest's ``classname`` (the file's dotted path, then any class: ``tests.api.test_jobs`` or
    ``tests.api.test_jobs.TestX``) as the file's path and its classes."""
    parts, classes = classname.split("."), list[str]()
    while len(parts) > 1 and parts[-1][:1].isupper():  # a test class, not a module
        classes.insert(0, parts.pop())
    return "/".join(parts) + ".py", classes


def file_seconds(junit_xml: str) -> Counter[str]:
    """Seconds per test file in a JUnit XML report, summed over its test cases (and classes)."""
    totals: Counter[str] = Counter()
    for case in ElementTree.fromstring(junit_xml).iter("testcase"):
        totals[_file_and_classes(case.get("classname", ""))[0]] += float(case.get("time", "0") or 0)
    return totals


#: How much of a failure's error :func:`failures` keeps (the end of a CI log is what a reader sees first).
ERROR_CHARS = 400


def failures(junit_xml: str) -> list[tuple[str, str]]:
    """Each failed or errored test case of a JUnit XML report as (``path::name``, its error in a line, at most
    :data:`ERROR_CHARS`): the first line of pytest's ``message`` attribute (the exception's type and
    message), else the last non-blank line of the element's text (the traceback's end).
    A long traceback (an app's lifespan nests dozens of frames) pushes the error out of a log's visible
    end; this keeps it."""
    found: list[tuple[str, str]] = []
    for case in ElementTree.fromstring(junit_xml).iter("testcase"):
        for outcome in (*case.iter("failure"), *case.iter("error")):
            path, classes = _file_and_classes(case.get("classname", ""))
            test = "::".join([path, *classes, case.get("name", "")])
            message = [line for line in (outcome.get("message") or "").splitlines() if line.strip()]
            text = [line for line in (outcome.text or "").splitlines() if line.strip()]
            said = message[0].strip() if message else text[-1].strip() if text else outcome.tag
            found.append((test, said[:ERROR_CHARS] + ("…" if len(said) > ERROR_CHARS else "")))
    return found
