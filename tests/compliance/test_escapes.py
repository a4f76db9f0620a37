"""Escapes a red-team pass found (issue: close the holes a hostile user finds), one regression each.

The hostile table (test_hostile.py) covers limits every evaluator meets; these need a set-up of
their own: the real service process, an inherited descriptor, a second evaluator.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS, evaluate, serving

CANARY = "canary-7f3a91"

READ_FD = {
    "python": (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    try:\n        return {{'score': 0, 'leak': os.pread({fd}, 64, 0).decode()}}\n"
        "    except OSError as e:\n        return {{'score': 1, 'error': str(e)}}\n"
    ),
    "javascript": (
        "const fs = require('fs')\nfunction evaluate(inputs, outputs, trace) {{\n"
        "  try {{ const b = Buffer.alloc(64); const n = fs.readSync({fd}, b, 0, 64, 0)\n"
        "    return {{ score: 0, leak: b.toString('utf8', 0, n) }} }}\n"
        "  catch (e) {{ return {{ score: 1, error: String(e) }} }}\n}}\n"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_descriptors_the_service_inherited_never_reach_user_code(tmp_path: Path, backend: str) -> None:
    """Regression: started with ``exec 7</root/x`` in its shell, the service's workers read fd 7 (the
    event loop's spawn ignored ``close_fds``). The sandbox closes every descriptor but its channel."""
    secret = tmp_path / "secret"
    secret.write_text(CANARY)
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        with serving(tmp_path / "data", backend, pass_fds=(fd,)) as (client, _proc):
            for language, code in READ_FD.items():
                body: dict[str, Any] = {"language": language, "code": code.format(fd=fd)}
                result = client.post("/v1/evaluate", json=body).json()
                assert result["status"] == "ok", result
                assert CANARY not in str(result) and result["score"] == 1.0, (language, result)
    finally:
        os.close(fd)


HOST_ETC = [p for p in ("/etc/pip.conf", "/etc/npmrc", "/etc/machine-id", "/etc/hostname") if os.path.isfile(p)]
LIST_ETC = {
    "python": (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n    seen = {}\n"
        "    for path in inputs['paths']:\n        try:\n            seen[path] = open(path).read()\n"
        "        except OSError:\n            pass\n"
        "    return {'score': 1, 'seen': seen, 'etc': sorted(os.listdir('/etc'))}\n"
    ),
    "javascript": (
        "const fs = require('fs')\nfunction evaluate(inputs, outputs, trace) {\n  const seen = {}\n"
        "  for (const p of inputs.paths) { try { seen[p] = fs.readFileSync(p, 'utf8') } catch (e) {} }\n"
        "  return { score: 1, seen, etc: fs.readdirSync('/etc').sort() }\n}\n"
    ),
}


@pytest.mark.parametrize("language", list(LIST_ETC))
def test_the_hosts_etc_is_not_visible(client: Any, language: str) -> None:
    """Regression: the process sandbox bound the host's whole /etc (pip.conf and npmrc hold index
    credentials on many machines). Only what the C library needs is there, and nothing of the host's."""
    result = evaluate(client, LIST_ETC[language], language, inputs={"paths": HOST_ETC})
    assert result["status"] == "ok", result
    seen = result["details"]["seen"]
    for path in HOST_ETC:
        host = Path(path).read_text()
        assert seen.get(path) != host, f"{path} of the host is readable in the sandbox"
    if client.get("/healthz").json()["backend"] == "process":
        allowed = {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "passwd", "group"}
        assert set(result["details"]["etc"]) <= allowed | {"nsswitch.conf"}, result["details"]["etc"]
