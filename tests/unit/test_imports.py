"""Imports no pin provides are named before the code runs; the standard library and the lock count."""

from __future__ import annotations

from evaluator_host.definitions.imports import unpinned


def test_python_imports_outside_stdlib_and_lock_are_named_with_the_package_to_pin() -> None:
    code = "import os, json\nimport numpy as np\nimport pandas\nfrom sklearn.metrics import f1_score\nfrom . import x\n"
    (warning,) = unpinned("pip", code, {"pandas": "2.2.3"}, ["pandas==2.2.3", "numpy==2.0.0"])
    assert "'scikit-learn'" in warning and '{"scikit-learn": "<version>"}' in warning  # by its package name
    assert "numpy" not in warning and "pandas" not in warning  # a dependency of a pin counts
    assert unpinned("pip", "import os\nfrom __future__ import annotations\n", {}, []) == []


def test_node_builtins_relative_paths_and_pins_are_not_named() -> None:
    code = (
        'import fs from "node:fs"\nimport * as _ from "lodash"\nconst p = require("path")\n'
        'const z = require("zod")\nimport x from "@scope/pkg/sub"\nimport "./local"\n'
    )
    (warning,) = unpinned("npm", code, {"lodash": "4.17.21"}, ["lodash@4.17.21"])
    assert "'zod', '@scope/pkg'" in warning and "lodash" not in warning and "fs" not in warning
