""" "Did you mean" from what pip and npm really print (captured from pip 25 / npm 11 on this machine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evaluator_host.builds.suggest import nearest_version, suggestions
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from tests.support.service import make_settings

PIP_WRONG_VERSION = """\
Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple
ERROR: Ignored the following yanked versions: 2.4.0
ERROR: Could not find a version that satisfies the requirement numpy==1.26.99 (from versions: 1.23.2, 1.23.3, \
1.24.0, 1.25.2, 1.26.0, 1.26.1, 1.26.2, 1.26.3, 1.26.4, 2.0.0, 2.3.0rc1, 2.3.0, 2.4.6)
ERROR: No matching distribution found for numpy==1.26.99
"""
PIP_UNKNOWN_NAME = """\
WARNING: Location 'file:///opt/pypi/simple/sklearn/' is ignored: it is neither a file nor a directory.
ERROR: Could not find a version that satisfies the requirement sklearn==1.5.2 (from versions: none)
ERROR: No matching distribution found for sklearn==1.5.2
"""
PIP_TYPO = """\
ERROR: Could not find a version that satisfies the requirement nump==1.26.4 (from versions: none)
ERROR: No matching distribution found for nump==1.26.4
"""
NPM_WRONG_VERSION = """\
npm error code ETARGET
npm error notarget No matching version found for lodash@4.17.99.
npm error notarget In most cases you or one of your dependencies are requesting a package version that doesn't exist.
"""
NPM_UNKNOWN_NAME = """\
npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/lodash-zzq-nonexist
npm error 404
npm error 404  The requested resource 'lodash-zzq-nonexist@1.0.0' could not be found or you do not have permission.
"""


def test_a_pinned_version_pip_does_not_have_gets_the_nearest_one_and_the_latest() -> None:
    assert suggestions("pip", PIP_WRONG_VERSION) == ["did you mean numpy==1.26.4? (the latest is 2.4.6)"]


def test_an_import_name_pinned_as_a_package_gets_the_package() -> None:
    assert suggestions("pip", PIP_UNKNOWN_NAME) == [
        "did you mean scikit-learn? (sklearn is what the code imports; the package is scikit-learn)"
    ]


def test_a_name_no_index_has_is_said_plainly() -> None:
    assert suggestions("pip", PIP_TYPO) == [
        "pip found no installable 'nump' on the configured indexes: check the spelling"
    ]


def test_npm_wrong_version_asks_npm_for_the_versions() -> None:
    asked: list[str] = []

    def versions(name: str) -> list[str]:
        asked.append(name)
        return ["4.17.19", "4.17.20", "4.17.21", "5.0.0-beta.1"]

    assert suggestions("npm", NPM_WRONG_VERSION, versions) == ["did you mean lodash@4.17.21?"]
    assert asked == ["lodash"]


def test_npm_unknown_name() -> None:
    assert suggestions("npm", NPM_UNKNOWN_NAME) == [
        "no package named 'lodash-zzq-nonexist' in the npm registry: check the spelling"
    ]


@pytest.mark.parametrize(
    ("wanted", "versions", "nearest"),
    [
        ("1.26.99", ["1.25.0", "1.26.3", "1.26.4", "2.0.0"], "1.26.4"),
        ("1.2", ["1.10.0", "1.2.1", "1.3"], "1.2.1"),
        ("0.0.1", ["1.0", "2.0"], "1.0"),
        ("3.0", ["1.0", "2.0", "3.0rc1"], "2.0"),
    ],
)
def test_nearest_version(wanted: str, versions: list[str], nearest: str) -> None:
    assert nearest_version(wanted, versions)[0] == nearest


@pytest.mark.network
def test_a_real_npm_install_of_a_missing_version_suggests_the_real_one(tmp_path: Path) -> None:
    """Against the real npm registry (about a second)."""
    builder = RuntimeBuilder(make_settings(tmp_path))
    with pytest.raises(BuildError) as info:
        asyncio.run(builder.ensure("javascript", {"lodash": "4.17.99"}))
    (hint,) = info.value.suggestions  # the registry moves on: the nearest 4.17.x, and the latest
    assert hint.startswith("did you mean lodash@4.17.") and hint in info.value.message


def test_uvs_words_for_a_pin_that_needs_another_python_name_its_requires_python() -> None:
    out = (
        "error: No solution found when resolving dependencies\n  cause: Because the current Python version (3.11.2) "
        "does not satisfy Python>=3.12,<3.14 and nemo-platform==0.6.0 depends on Python>=3.12,<3.14, we can "
        "conclude that nemo-platform==0.6.0 cannot be used."
    )
    (hint,) = suggestions("pip", out)
    assert "Requires-Python" in hint and "Python>=3.12,<3.14" in hint and "3.11.2" in hint
