"""Inside a domain, rooms import only down: the order each domain's package docstring states, checked on every import.

``tests/unit/test_layers.py`` keeps the domains in their layers; this keeps the rooms of a domain in theirs
(issue 49). A room is a sub-folder of a domain; its modules may import the rooms listed before it, the domain's
top-level shared pieces named here, and (``online``) the API's shapes, which are pure models importable from anywhere
in the domain. ``store``'s rooms are table families, peers on purpose (its docstring says why): not checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "evaluator_host"

# domain -> its rooms from the bottom up; a room may import only the rooms before it
ORDER: dict[str, tuple[str, ...]] = {
    "online": ("reading", "receive", "levels", "deciding", "candidates", "scoring", "backfill"),
    "evaluation": ("outcomes", "caching"),
}
# domain -> the top-level modules a room may import whatever its place (shapes and shared pieces)
SHARED: dict[str, tuple[str, ...]] = {
    "online": ("models",),
    # the cache keys a definition: the path's concepts and models are below it, the use cases above
    "evaluation": ("models", "path", "prepared", "bound", "limits", "plain_env", "results"),
}
# the command rooms of the CLI are peers: each may import the shared pieces, never another room
CLI_ROOMS = ("evaluate", "service", "operate")
CLI_SHARED = ("inputs", "output", "remote", "lazy")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _target(domain: str, name: str) -> str | None:
    """The room (folder) or top-level module of ``domain`` that an imported name lands in; None outside it."""
    prefix = f"evaluator_host.{domain}."
    if not name.startswith(prefix):
        return None
    first = name[len(prefix) :].split(".")[0]
    return first


def _is_shape(name: str) -> bool:
    """An API shape module (``models``, ``*_models``), imported whole or a name of it."""
    return any(part == "models" or part.endswith("_models") for part in name.split(".")[-2:])


@pytest.mark.parametrize("domain", sorted(ORDER))
def test_a_room_imports_only_the_rooms_below_it(domain: str) -> None:
    rooms = ORDER[domain]
    assert sorted(rooms) == sorted(p.name for p in (PACKAGE / domain).iterdir() if (p / "__init__.py").is_file()), (
        "every room of the domain has its place in ORDER"
    )
    bad = []
    for index, room in enumerate(rooms):
        allowed = set(rooms[: index + 1]) | set(SHARED[domain])
        for path in sorted((PACKAGE / domain / room).rglob("*.py")):
            for line, name in _imports(path):
                target = _target(domain, name)
                if target is None or target in allowed or (domain == "online" and _is_shape(name)):
                    continue
                bad.append(f"{path.relative_to(PACKAGE)}:{line} imports {name} (room {target!r} is not below {room!r})")
    assert bad == [], "\n".join(bad)


def test_the_cli_command_rooms_import_only_the_shared_pieces() -> None:
    bad = []
    for room in CLI_ROOMS:
        for path in sorted((PACKAGE / "cli" / room).rglob("*.py")):
            for line, name in _imports(path):
                target = _target("cli", name)
                if target is None or target == room or target in CLI_SHARED:
                    continue
                bad.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    assert bad == [], "\n".join(bad)


def test_the_check_sees_a_room_importing_upward() -> None:
    """The rule is live: a room importing a room above it is named (the check compares something)."""
    assert _target("online", "evaluator_host.online.scoring.scorer.Scorer") == "scoring"
    rooms = ORDER["online"]
    assert rooms.index("scoring") > rooms.index("levels")
    assert _is_shape("evaluator_host.online.backfill.models.Backfill")
    assert not _is_shape("evaluator_host.online.backfill.runs.Backfiller")


def test_every_room_says_what_it_owns_and_may_import() -> None:
    """Each room's package docstring exists and names the rule (the contract a newcomer reads first)."""
    missing = []
    for domain in ("online", "store", "evaluation", "cli"):
        for room in sorted(p for p in (PACKAGE / domain).iterdir() if (p / "__init__.py").is_file()):
            if room.name == "migrations":
                continue
            text = ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or ""
            if len(text) < 80 or "import" not in text:
                missing.append(f"{domain}/{room.name}")
    assert missing == [], missing
