"""The before/after fixtures of the migration rules (``tests/migrate/fixtures/<family>/NAME.before.<ext>`` and
``NAME.after.<ext>``). A first line ``<comment> migrate: correct_answer_key=K`` sets the key.

``python -m tests.support.migrate_fixtures`` (re)writes every ``after`` file from the tool; review the
diff before committing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evaluator_host.definitions import languages

ROOT = Path(__file__).resolve().parents[1] / "migrate" / "fixtures"
_KEY = re.compile(r"migrate: correct_answer_key=(\w+)")


@dataclass(frozen=True)
class Fixture:
    name: str
    language: str
    before: Path

    @property
    def after(self) -> Path:
        return self.before.with_name(self.before.name.replace(".before.", ".after."))

    @property
    def key(self) -> str:
        found = _KEY.search(self.before.read_text().splitlines()[0])
        return found.group(1) if found else "correct_answer"

    def __str__(self) -> str:
        return f"{self.before.parent.name}/{self.name}"


def fixtures(family: str | None = None) -> list[Fixture]:
    """Every fixture (of ``family``: ``python`` or ``node``), sorted."""
    found = []
    for before in sorted(ROOT.glob("*/*.before.*")):
        if family is not None and before.parent.name != family:
            continue
        language = languages.by_suffix(before.suffix)
        assert language is not None, before
        found.append(Fixture(before.name.split(".before.")[0], language.name, before))
    return found


if __name__ == "__main__":
    from evaluator_host.migration.codemod import migrate

    for fixture in fixtures():
        migrated = migrate(fixture.language, fixture.before.read_text(), fixture.key)
        fixture.after.write_text(migrated.code)
