"""definitions/determinism.py: what makes an evaluator's results not cached by default."""

from __future__ import annotations

import pytest

from evaluator_host.definitions.determinism import unsure


@pytest.mark.parametrize(
    ("language", "code", "kind"),
    [
        ("python", "import random\ndef evaluate(i, o, t):\n    return random.random()\n", "randomness"),
        ("python", "from datetime import datetime\ndef evaluate(i, o, t):\n    return 1\n", "time"),
        ("python", "import time\ndef evaluate(i, o, t):\n    return time.time() > 0\n", "time"),
        ("python", "import uuid\ndef evaluate(i, o, t):\n    return str(uuid.uuid4())\n", "randomness"),
        ("python", "import os\ndef evaluate(i, o, t):\n    return len(os.urandom(4))\n", "randomness"),
        ("python", "import os\ndef evaluate(i, o, t):\n    return os.environ['X']\n", "environment"),
        ("python", "import requests\ndef evaluate(i, o, t):\n    return requests.get('x').ok\n", "network"),
        ("python", "def evaluate(i, o, t):\n    return open('/tmp/x').read()\n", "filesystem"),
        ("javascript", "function evaluate(i, o, t) { return Math.random() }", "randomness"),
        ("javascript", "function evaluate(i, o, t) { return Date.now() > 0 }", "time"),
        (
            "typescript",
            "const c = require('crypto');\nfunction evaluate(i: any, o: any, t: any) { return 1 }",
            "randomness",
        ),
        ("javascript", "function evaluate(i, o, t) { return fetch('http://x') }", "network"),
    ],
)
def test_what_makes_a_result_unsure(language: str, code: str, kind: str) -> None:
    reasons = unsure(language, code)
    assert any(reason.startswith(f"{kind}:") for reason in reasons), reasons


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "import json, math, re\ndef evaluate(i, o, t):\n    return math.isclose(len(json.dumps(o)), 3)\n"),
        ("javascript", "function evaluate(i, o, t) { return o === i.expected } // no Math.random here\n"),
    ],
)
def test_pure_code_is_sure(language: str, code: str) -> None:
    assert unsure(language, code) == []
