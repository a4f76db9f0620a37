"""The language registry: fed by runtimes/<family>/manifest.json, and the only place that names languages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evaluator_host.definitions import languages
from evaluator_host.errors import InterfaceError

PACKAGE = Path(languages.__file__).resolve().parent


def _names() -> set[str]:
    return set(languages.names()) | {family.name for family in languages.families()}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_no_module_outside_the_registry_names_a_language_or_family() -> None:
    """Every python/node branch goes through the registry: no other module of the package holds a
    string naming a language or a family (a comparison, a dict key, a default, a Literal)."""
    names = _names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(languages.__file__).resolve():
            continue
        tree = ast.parse(path.read_text(), str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert found == [], "\n".join(found)


def test_the_registry_reads_every_manifest() -> None:
    manifests = sorted(p.parent.name for p in languages.RUNTIMES_DIR.glob("*/manifest.json"))
    assert sorted(f.name for f in languages.families()) == manifests
    assert languages.names() == ["javascript", "typescript", "python"]
    for name in languages.names():
        language = languages.get(name)
        assert language.family.harness_path.exists()
        assert language.module_suffix in (".py", ".cjs")


@pytest.mark.parametrize(
    ("suffix", "language"),
    [
        (".py", "python"),
        (".js", "javascript"),
        (".mjs", "javascript"),
        (".cjs", "javascript"),
        (".ts", "typescript"),
        (".mts", "typescript"),
        (".TS", "typescript"),
        (".rb", None),
    ],
)
def test_file_suffixes_name_their_language(suffix: str, language: str | None) -> None:
    found = languages.by_suffix(suffix)
    assert (found.name if found else None) == language


def test_an_unknown_language_is_a_definition_error_naming_the_supported_ones() -> None:
    with pytest.raises(InterfaceError, match="python"):
        languages.get("cobol")


def test_pins_are_written_and_split_the_family_way() -> None:
    python, node = languages.get("python").family, languages.get("typescript").family
    assert python.pin_text("six", "1.16.0") == "six==1.16.0" and node.pin_text("lodash", "4.17.21") == "lodash@4.17.21"
    assert python.split_pin("six==1.16.0") == ("six", "1.16.0")
    assert node.split_pin("@scope/pkg@1.2.3") == ("@scope/pkg", "1.2.3")
    assert node.split_pin("@scope/pkg") is None and python.split_pin("six") is None


def test_a_harness_command_is_the_manifest_template_filled_in() -> None:
    node = languages.get("javascript").family
    argv = node.command_for("/bin/node", "/h/harness.mjs", 256, {"a": 1})
    assert argv == [
        "/bin/node",
        "--max-old-space-size=192",
        "--disable-warning=ExperimentalWarning",
        "/h/harness.mjs",
        '{"a": 1}',
    ]
    assert node.packages_config(None) == {"node_modules": None}
    assert languages.get("python").family.packages_config("/r/site") == {"site_dirs": ["/r/site"]}
