"""Every before/after fixture of the codemods (``fixtures/``): the tool turns each ``before`` into its
``after`` exactly, the ``after`` is a v2 evaluator (or the unchanged code), and migrating it again
changes nothing."""

from __future__ import annotations

import pytest

from evaluator_host.definitions.interfaces import detect
from evaluator_host.migration.codemod import migrate
from tests.support.migrate_fixtures import Fixture, fixtures

PYTHON = fixtures("python")
NODE = fixtures("node")


def test_there_are_at_least_30_fixtures_per_language_family() -> None:
    assert len(PYTHON) >= 30 and len(NODE) >= 30


@pytest.mark.parametrize("fixture", PYTHON + NODE, ids=str)
def test_the_tool_turns_before_into_after(fixture: Fixture) -> None:
    migrated = migrate(fixture.language, fixture.before.read_text(), fixture.key)
    assert migrated.code == fixture.after.read_text()
    assert migrated.changed == (migrated.code != migrated.original)
    before = detect(fixture.language, fixture.before.read_text()).interface
    assert migrated.interface_before == before
    assert migrated.interface_after == (before if before != "legacy" else "evaluate")
    assert detect(fixture.language, migrated.code).interface == migrated.interface_after
    if migrated.changed:
        assert migrated.diff().startswith("--- a/evaluator\n+++ b/evaluator\n")
        assert migrated.rules


@pytest.mark.parametrize("fixture", PYTHON + NODE, ids=str)
def test_migrating_the_result_again_changes_nothing(fixture: Fixture) -> None:
    again = migrate(fixture.language, fixture.after.read_text(), fixture.key)
    assert not again.changed and again.code == fixture.after.read_text() and again.diff() == ""
