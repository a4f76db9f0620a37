"""Import names that differ from the PyPI package providing them (``sklearn`` is ``scikit-learn``).

One table for the two places that need it: the unpinned-import warning
(:mod:`evaluator_host.definitions.imports`) and the "did you mean" of a failed install
(:mod:`evaluator_host.builds.suggest`). Imports nothing, so every layer may use it.
"""

from __future__ import annotations

import re

__all__ = ["PYPI_NAMES", "pypi_name_of"]

# import name → PyPI package, where they differ (the common cases)
PYPI_NAMES = {
    "sklearn": "scikit-learn",
    "nemo_evaluator_sdk": "nemo-platform",
    "yaml": "pyyaml",
    "cv2": "opencv-python",
    "PIL": "pillow",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "attr": "attrs",
    "google.protobuf": "protobuf",
    "Levenshtein": "levenshtein",
    "rapidfuzz": "rapidfuzz",
    "jwt": "pyjwt",
    "dotenv": "python-dotenv",
    "docx": "python-docx",
    "Crypto": "pycryptodome",
    "skimage": "scikit-image",
    "nltk": "nltk",
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pypi_name_of(import_name: str) -> str | None:
    """The PyPI package providing ``import_name`` when its name differs (``sklearn`` → ``scikit-learn``)."""
    wanted = _canonical(import_name)
    for module, package in PYPI_NAMES.items():
        if _canonical(module) == wanted and _canonical(package) != wanted:
            return package
    return None
