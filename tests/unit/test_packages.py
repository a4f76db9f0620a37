"""evaluator_host.definitions.packages: exact pins only, and the runtime id of a package set."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.builds.build_once import runtime_id
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import DefinitionError, PackageSpecError


def rejected(language: str, packages: Any) -> PackageSpecError:
    """``packages`` is rejected; return the error."""
    with pytest.raises(PackageSpecError) as info:
        normalize_pins(language, packages)
    assert isinstance(info.value, DefinitionError)
    return info.value


def assert_names_entry(error: PackageSpecError, *fragments: str) -> None:
    for fragment in fragments:
        assert fragment in error.message, error.message
        assert fragment in error.package, error.package


# --- accepted: python ---------------------------------------------------------------------


@pytest.mark.parametrize("packages", [None, {}, []])
def test_empty(packages: Any) -> None:
    assert normalize_pins("python", packages) == {}
    assert normalize_pins("javascript", packages) == {}


def test_python_dict_form() -> None:
    assert normalize_pins("python", {"numpy": "1.26.4", "six": "1.16.0"}) == {"numpy": "1.26.4", "six": "1.16.0"}


def test_python_list_form() -> None:
    assert normalize_pins("python", ["numpy==1.26.4", "six==1.16.0"]) == {"numpy": "1.26.4", "six": "1.16.0"}


def test_python_list_and_dict_forms_agree() -> None:
    assert normalize_pins("python", ["Six==1.16.0", "numpy == 1.26.4"]) == normalize_pins(
        "python", {"numpy": "1.26.4", "six": "1.16.0"}
    )


def test_python_result_sorted_by_name() -> None:
    assert list(normalize_pins("python", {"zzz": "1.0", "aaa": "2.0", "mmm": "3.0"})) == ["aaa", "mmm", "zzz"]


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("NumPy", "numpy"),
        ("Django", "django"),
        ("typing_extensions", "typing-extensions"),
        ("zope.interface", "zope-interface"),
        ("Foo__Bar..Baz--Qux", "foo-bar-baz-qux"),
        ("ruamel.yaml", "ruamel-yaml"),
        ("a", "a"),
        ("  six  ", "six"),
    ],
)
def test_python_name_normalization(name: str, normalized: str) -> None:
    assert normalize_pins("python", {name: "1.0"}) == {normalized: "1.0"}
    assert normalize_pins("python", [f"{name}==1.0"]) == {normalized: "1.0"}


@pytest.mark.parametrize("value", ["==1.0", "== 1.0", " 1.0 ", "==1.0 "])
def test_python_double_equals_value_accepted(value: str) -> None:
    assert normalize_pins("python", {"six": value}) == {"six": "1.0"}


@pytest.mark.parametrize(
    "version",
    ["1.26.4", "1", "2024.1", "1.0a1", "1.0b2", "2.0.0rc1", "1.0.post1", "1.0.dev3", "1!2.0", "1.0+local.7", "0.0.0"],
)
def test_python_exact_version_forms(version: str) -> None:
    assert normalize_pins("python", {"pkg": version}) == {"pkg": version}


def test_python_extras_accepted_and_normalized() -> None:
    assert normalize_pins("python", ["requests[security]==2.31.0"]) == {"requests[security]": "2.31.0"}
    assert normalize_pins("python", {"Requests[Socks,Security]": "2.31.0"}) == {"requests[security,socks]": "2.31.0"}


def test_python_same_pin_twice_is_fine() -> None:
    assert normalize_pins("python", ["six==1.16.0", "Six==1.16.0", "SIX==1.16.0"]) == {"six": "1.16.0"}


# --- accepted: npm ------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_npm_dict_form(language: str) -> None:
    packages = {"lodash": "4.17.21", "@types/node": "20.11.5", "zod": "3.22.4"}
    assert normalize_pins(language, packages) == {"@types/node": "20.11.5", "lodash": "4.17.21", "zod": "3.22.4"}


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_npm_list_form_with_scoped_names(language: str) -> None:
    assert normalize_pins(language, ["lodash@4.17.21", "@scope/name@1.2.3", "@babel/core@7.24.0"]) == {
        "@babel/core": "7.24.0",
        "@scope/name": "1.2.3",
        "lodash": "4.17.21",
    }


@pytest.mark.parametrize("version", ["1.2.3", "0.0.1", "10.20.30", "1.2.3-beta.1", "1.2.3-rc-1", "1.2.3+build.5"])
def test_npm_exact_version_forms(version: str) -> None:
    assert normalize_pins("javascript", {"pkg": version}) == {"pkg": version}
    assert normalize_pins("javascript", [f"pkg@{version}"]) == {"pkg": version}


@pytest.mark.parametrize("name", ["lodash.merge", "left-pad", "a", "x_y", "abc~1", "@a/b", "@scope/my.pkg-2"])
def test_npm_valid_names(name: str) -> None:
    assert normalize_pins("javascript", {name: "1.0.0"}) == {name: "1.0.0"}


# --- rejected -----------------------------------------------------------------------------

PY_BAD_VERSIONS = [
    ">=2",
    ">2.0",
    "<3",
    "~=1.2",
    "~1.2",
    "^1.2.3",
    "1.*",
    "*",
    "!=1.0",
    "===1.0",
    ">=1.0,<2.0",
    "latest",
    "",
    "https://example.com/six-1.16.0.tar.gz",
    "file:///tmp/six.whl",
    "./six-1.16.0.whl",
    "/tmp/six",
    "git+https://github.com/benjaminp/six@1.16.0",
    "1.0; python_version<'3'",
    "1.0 ; sys_platform == 'linux'",
    "1.0 --index-url http://x",
    "1.0 --extra-index-url=http://evil",
    "--pre",
    "-e .",
    "1.0\n--index-url http://x",
    "1.0 1.1",
    "v1.0",
]


@pytest.mark.parametrize("version", PY_BAD_VERSIONS)
def test_python_dict_bad_version_rejected(version: str) -> None:
    error = rejected("python", {"six": version})
    assert_names_entry(error, "six")
    assert repr(f"six: {version}") in error.message


@pytest.mark.parametrize("version", PY_BAD_VERSIONS)
def test_python_list_bad_version_rejected(version: str) -> None:
    entry = f"six=={version}"
    error = rejected("python", ["numpy==1.26.4", entry])
    assert error.package == entry
    assert repr(entry) in error.message


@pytest.mark.parametrize(
    "entry",
    [
        "six",
        "six>=1.0",
        "six~=1.16",
        "six<2",
        "six = 1.0",
        "six @ https://example.com/six.whl",
        "six @ file:///tmp/six",
        "git+https://github.com/benjaminp/six",
        "./six",
        "/tmp/six-1.16.0.whl",
        "six; rm -rf /",
        "--pre",
        "--index-url http://x",
        "-r requirements.txt",
        "",
    ],
)
def test_python_list_entries_without_exact_pin_rejected(entry: str) -> None:
    error = rejected("python", [entry])
    assert error.package == entry
    assert repr(entry) in error.message


@pytest.mark.parametrize(
    "name",
    [
        "-six",
        "six-",
        ".six",
        "six.",
        "si x",
        "six;",
        "six; rm -rf /",
        "--index-url",
        "--pre",
        "../six",
        "./six",
        "/tmp/six",
        "https://x/six",
        "six[",
        "six[]",
        "six[a]b",
        "six[a]]",
        "six[a b]",
        "six[a];python_version<'3'",
        "naïve",
        "",
    ],
)
def test_python_invalid_names_rejected(name: str) -> None:
    error = rejected("python", {name: "1.0"})
    assert "not a valid PyPI package name" in error.message
    assert error.package == f"{name}: 1.0"


def test_python_invalid_name_in_list_names_the_entry() -> None:
    error = rejected("python", ["six==1.16.0", "bad name==1.0"])
    assert error.package == "bad name==1.0"
    assert "'bad name==1.0'" in error.message


NPM_BAD_VERSIONS = [
    "^1.2.3",
    "~1.2.3",
    "~1.2",
    ">=1.0.0",
    "<2.0.0",
    "1.x",
    "1.2.x",
    "1.*",
    "*",
    "x",
    "1.2",
    "1",
    "v1.2.3",
    "=1.2.3",
    "01.2.3",
    "1.2.3 - 2.0.0",
    "1.2.3 || 2.0.0",
    "latest",
    "next",
    "beta",
    "",
    "https://example.com/foo-1.0.0.tgz",
    "file:../foo",
    "./foo",
    "/tmp/foo.tgz",
    "git+https://github.com/x/foo.git",
    "github:x/foo",
    "x/foo",
    "npm:other@1.0.0",
    "workspace:*",
    "1.0.0 --registry=http://evil",
    "1.0.0; rm -rf /",
]


@pytest.mark.parametrize("language", ["javascript", "typescript"])
@pytest.mark.parametrize("version", NPM_BAD_VERSIONS)
def test_npm_dict_bad_version_rejected(language: str, version: str) -> None:
    error = rejected(language, {"foo": version})
    assert_names_entry(error, "foo")
    assert repr(f"foo: {version}") in error.message


@pytest.mark.parametrize("version", NPM_BAD_VERSIONS)
def test_npm_list_bad_version_rejected(version: str) -> None:
    entry = f"foo@{version}"
    error = rejected("javascript", ["lodash@4.17.21", entry])
    assert error.package == entry
    assert repr(entry) in error.message


@pytest.mark.parametrize(
    "entry",
    [
        "foo",
        "@scope/foo",
        "foo==1.0.0",
        "git+ssh://git@github.com/x/foo.git",
        "https://example.com/foo.tgz",
        "--registry=http://evil",
        "",
    ],
)
def test_npm_list_entries_without_exact_pin_rejected(entry: str) -> None:
    error = rejected("javascript", [entry])
    assert error.package == entry
    assert repr(entry) in error.message


@pytest.mark.parametrize(
    "name",
    [
        "Lodash",
        "UPPER",
        ".hidden",
        "_private",
        "-dash",
        "has space",
        "@scope/",
        "@/name",
        "@Scope/name",
        "scope/name",
        "@scope/name/extra",
        "--registry=http://evil",
        "../foo",
        "foo;rm",
        "a" * 215,
        "",
    ],
)
def test_npm_invalid_names_rejected(name: str) -> None:
    error = rejected("javascript", {name: "1.0.0"})
    assert "not a valid npm package name" in error.message
    assert error.package == f"{name}: 1.0.0"


def test_npm_name_length_limit() -> None:
    assert normalize_pins("javascript", {"a" * 214: "1.0.0"}) == {"a" * 214: "1.0.0"}


def test_conflicting_duplicate_python_pins_rejected() -> None:
    error = rejected("python", ["six==1.16.0", "numpy==1.26.4", "Six==1.15.0"])
    assert error.package == "Six==1.15.0"
    assert "pinned twice" in error.message
    error = rejected("python", {"typing_extensions": "4.9.0", "typing-extensions": "4.8.0"})
    assert "typing-extensions" in error.package
    assert "pinned twice" in error.message


def test_conflicting_pins_with_and_without_extras_rejected() -> None:
    error = rejected("python", ["requests[security]==2.31.0", "requests==2.30.0"])
    assert error.package == "requests==2.30.0"
    assert "pinned twice" in error.message
    error = rejected("python", {"requests": "2.31.0", "Requests[socks]": "2.30.0"})
    assert "Requests[socks]" in error.package


def test_same_version_with_and_without_extras_accepted() -> None:
    assert normalize_pins("python", ["requests[socks]==2.31.0", "Requests==2.31.0"]) == {
        "requests": "2.31.0",
        "requests[socks]": "2.31.0",
    }


def test_conflicting_duplicate_npm_pins_rejected() -> None:
    error = rejected("javascript", ["lodash@4.17.21", "lodash@4.17.20"])
    assert error.package == "lodash@4.17.20"
    assert "pinned twice" in error.message


@pytest.mark.parametrize("version", [1, 1.0, None, True, ["1.0"], {"v": "1.0"}])
@pytest.mark.parametrize("language", ["python", "javascript"])
def test_non_string_version_rejected(language: str, version: Any) -> None:
    error = rejected(language, {"six": version})
    assert error.package == "six"
    assert "'six'" in error.message
    assert "string" in error.message


@pytest.mark.parametrize("entry", [1, None, 1.5, ["six==1.0"], {"six": "1.0"}])
def test_non_string_list_entry_rejected(entry: Any) -> None:
    error = rejected("python", ["numpy==1.26.4", entry])
    assert error.package == str(entry)
    assert "string" in error.message


# --- runtime_id ---------------------------------------------------------------------------

BASE = "python:3.11.7"


def test_runtime_id_stable_regardless_of_order() -> None:
    one = normalize_pins("python", ["six==1.16.0", "numpy==1.26.4", "attrs==23.2.0"])
    two = normalize_pins("python", {"attrs": "23.2.0", "NumPy": "1.26.4", "Six": "1.16.0"})
    assert runtime_id("python", BASE, one) == runtime_id("python", BASE, two)
    assert runtime_id("python", BASE, {"b": "1", "a": "2"}) == runtime_id("python", BASE, {"a": "2", "b": "1"})


def test_runtime_id_deterministic_and_shaped() -> None:
    rid = runtime_id("python", BASE, {"six": "1.16.0"})
    assert rid == runtime_id("python", BASE, {"six": "1.16.0"})
    family, _, digest = rid.partition("-")
    assert family == "python"
    assert len(digest) == 20
    assert all(c in "0123456789abcdef" for c in digest)


def test_runtime_id_differs_for_different_pins() -> None:
    ids = {
        runtime_id("python", BASE, {}),
        runtime_id("python", BASE, {"six": "1.16.0"}),
        runtime_id("python", BASE, {"six": "1.15.0"}),
        runtime_id("python", BASE, {"six": "1.16.0", "numpy": "1.26.4"}),
        runtime_id("python", BASE, {"numpy": "1.16.0"}),
    }
    assert len(ids) == 5


def test_runtime_id_differs_for_different_base() -> None:
    pins = {"six": "1.16.0"}
    assert runtime_id("python", "python:3.11.7", pins) != runtime_id("python", "python:3.12.1", pins)


def test_runtime_id_differs_by_language_family() -> None:
    pins = {"left-pad": "1.3.0"}
    python_id = runtime_id("python", "base", pins)
    node_id = runtime_id("javascript", "base", pins)
    assert python_id != node_id
    assert python_id.startswith("python-")
    assert node_id.startswith("node-")


def test_runtime_id_same_for_javascript_and_typescript() -> None:
    # both run on the same Node runtime with the same npm packages
    pins = {"zod": "3.22.4"}
    assert runtime_id("javascript", "node:24", pins) == runtime_id("typescript", "node:24", pins)


@pytest.mark.parametrize("language", ["python", "javascript"])
@pytest.mark.parametrize("name", ["name\n[x]", "six\nrequests", "lodash\n@1.0.0", "a\r\nb"])
def test_a_newline_in_a_name_is_refused_not_split_into_two_requirements(language: str, name: str) -> None:
    """Regression: ``$`` matched before a trailing newline, so ``{"name\\n[x]": "1.0.0"}`` passed the
    check and became two requirement lines; names are matched whole (``fullmatch``)."""
    with pytest.raises(PackageSpecError):
        normalize_pins(language, {name: "1.0.0"})
