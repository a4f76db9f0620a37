"""Fixtures: named cases stored with an evaluator revision and the result each must give.

A fixture is ``{name, inputs, outputs, trace?, expect}`` (:class:`~evaluator_host.evaluation.models.Fixture`);
``expect`` holds at least one of ``score`` (agreeing within ``tolerance``, default 1e-9), ``passed``,
``label`` and ``status``. Without ``status`` the run must end ``ok``: a fixture that expects a score of
a run that raised fails, and says why. With ``status`` (``"error"``, ``"timeout"`` …) the fixture pins a
failure the evaluator must keep reporting.

:func:`check` compares one result with its fixture and :func:`report` a revision's fixtures with their
results; both are pure, so the service (on save: ``evaluation/evaluators.py``, and ``POST
/v1/evaluators/{id}/test``) and the command line (``evaluator-host test FILE``) judge the same way.
:func:`junit_xml` writes a report as JUnit XML for CI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.etree import ElementTree

from evaluator_host.evaluation.models import EvaluationResult, Fixture, FixtureOutcome, FixtureReport

__all__ = ["check", "junit_xml", "report"]


def _number(value: float | None) -> str:
    return "null" if value is None else f"{value:g}"


def check(fixture: Fixture, result: EvaluationResult) -> FixtureOutcome:
    """Whether ``result`` meets ``fixture.expect``; each difference is named in ``problems``."""
    expect = fixture.expect
    problems: list[str] = []
    wanted_status = expect.status or "ok"
    if result.status != wanted_status:
        problems.append(f"status {result.status}, expected {wanted_status}")
    if expect.score is not None:
        score = result.score
        if score is None or not math.isfinite(score) or abs(score - expect.score) > expect.tolerance:
            problems.append(f"score {_number(score)}, expected {_number(expect.score)} ± {_number(expect.tolerance)}")
    if expect.passed is not None and result.passed is not expect.passed:
        problems.append(f"passed {str(result.passed).lower()}, expected {str(expect.passed).lower()}")
    if expect.label is not None and result.label != expect.label:
        problems.append(f"label {result.label!r}, expected {expect.label!r}")
    error = f"{result.error.type}: {result.error.message}" if result.error is not None else None
    return FixtureOutcome(
        name=fixture.name,
        passed=not problems,
        problems=problems,
        status=result.status,
        score=result.score,
        result_passed=result.passed,
        label=result.label,
        error=error,
    )


def report(fixtures: Sequence[Fixture], results: Sequence[EvaluationResult]) -> FixtureReport:
    """Every fixture judged against its result (same order, same length)."""
    outcomes = [check(f, r) for f, r in zip(fixtures, results, strict=True)]
    passed = sum(o.passed for o in outcomes)
    return FixtureReport(passed=passed, failed=len(outcomes) - passed, results=outcomes)


def junit_xml(suite: str, fixtures_report: FixtureReport) -> bytes:
    """``fixtures_report`` as a JUnit XML document: one ``testsuite`` named ``suite``, a ``testcase`` a
    fixture, a ``failure`` (the problems, and the error when the run raised) for each that failed."""
    root = ElementTree.Element("testsuites")
    node = ElementTree.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(fixtures_report.results)),
        failures=str(fixtures_report.failed),
        errors="0",
    )
    for outcome in fixtures_report.results:
        case = ElementTree.SubElement(node, "testcase", name=outcome.name, classname=suite)
        if not outcome.passed:
            failure = ElementTree.SubElement(case, "failure", message="; ".join(outcome.problems))
            failure.text = "\n".join([*outcome.problems, *([outcome.error] if outcome.error else [])])
    written: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return written
