"""Where the files shipped beside the code live: the harnesses (``runtimes/``) and the built playground
(``web/dist``), in a source checkout and in an installed wheel alike.

A checkout keeps them at the top level, beside the package (``runtimes/``, ``web/dist``: the design card's
places). The wheel carries them as package data under ``evaluator_host/_bundled/`` (``runtimes/`` and ``web/``;
``setup.py`` copies them in at build time). The installed copy wins when it exists: an editable install
(``make install``) has none, so a checkout always serves its own live files.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUNDLED_DIR", "RUNTIMES_DIR", "WEB_DIST", "installed"]

_PACKAGE = Path(__file__).resolve().parents[1]  # evaluator_host/ (this module is in evaluator_host/shared/)
BUNDLED_DIR = _PACKAGE / "_bundled"  # in a wheel: runtimes/ and web/ (the built playground)


def installed() -> bool:
    """Whether this is an installed wheel (package data present) rather than a checkout."""
    return (BUNDLED_DIR / "runtimes").is_dir()


RUNTIMES_DIR = BUNDLED_DIR / "runtimes" if installed() else _PACKAGE.parent / "runtimes"
# web/dist may be absent in a checkout until `make web` (the page then says how to build it)
WEB_DIST = BUNDLED_DIR / "web" if installed() else _PACKAGE.parent / "web" / "dist"
