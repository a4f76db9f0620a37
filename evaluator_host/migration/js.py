"""The JavaScript/TypeScript migrator: ``runtimes/node/migrate.cjs`` in a host-side Node process.

The script parses with the inspector's own parser and detector (Node's acorn; TypeScript after
Node's strip-only type stripping, and, for what that cannot remove — enums, namespaces — after the
TypeScript compiler's parser blanked it: the ``typescript`` package pinned in
``migration/typescript/``'s lock, installed by ``make install``, its path passed as the script's
argument; both keep every offset) and splices the rewrite into the user's source at AST offsets; see its header
for the rules. It never runs the code. One Node
process is started per call of :func:`migrate_many` (migration is rare; a directory of files is
one call), bounded in time.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import node_executable
from evaluator_host.errors import CodeSyntaxError, InterfaceError, MigrationRefused
from evaluator_host.migration.base import Migration, Note, Reads

__all__ = ["migrate_js", "migrate_many"]

_TIMEOUT_S = 10.0  # per file, far above any real rewrite (linear, milliseconds)
SCRIPT = "migrate.cjs"
TS_PARSER = Path(__file__).resolve().parent / "typescript" / "node_modules" / "typescript"


def _run(requests: Sequence[dict[str, str]]) -> list[dict[str, object]]:
    """The answers to ``requests``: one Node process, and another for the rest after an answer marked
    ``restart`` (the process's last: its TypeScript transform overflowed the stack and is broken)."""
    answers: list[dict[str, object]] = []
    while len(answers) < len(requests):
        batch = _run_once(requests[len(answers) :])
        answers.extend(batch)
        if not batch or not batch[-1].get("restart"):
            break
    if len(answers) != len(requests):
        raise RuntimeError(f"the JS/TS migrator answered {len(answers)} of {len(requests)}")
    return answers


def _run_once(requests: Sequence[dict[str, str]]) -> list[dict[str, object]]:
    folder = languages.get(requests[0]["language"]).family.folder
    try:
        done = subprocess.run(
            [
                node_executable(),
                "--expose-internals",
                "--disable-warning=ExperimentalWarning",
                str(folder / SCRIPT),
                str(TS_PARSER),
            ],
            input="".join(json.dumps(r) + "\n" for r in requests).encode(),
            capture_output=True,
            timeout=_TIMEOUT_S * len(requests),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise MigrationRefused("the JS/TS migrator gave up (time limit)") from exc
    answers = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    if len(answers) != len(requests) and not (answers and answers[-1].get("restart")):
        stderr = done.stderr.decode()[-2000:]
        raise RuntimeError(f"the JS/TS migrator answered {len(answers)} of {len(requests)}: {stderr}")
    return answers


def _migration(request: dict[str, str], answer: dict[str, object]) -> Migration | Exception:
    if not answer.get("ok"):
        message = str(answer.get("message"))
        line, column = answer.get("line"), answer.get("column")
        assert line is None or isinstance(line, int)
        assert column is None or isinstance(column, int)
        kind = answer.get("kind")
        if kind == "syntax":
            return CodeSyntaxError(message, line=line, column=column)
        if kind == "interface":
            return InterfaceError(message, line=line)
        if kind == "refused":
            return MigrationRefused(message, line=line, column=column)
        return RuntimeError(message)
    notes = answer.get("notes")
    rules = answer.get("rules")
    assert isinstance(notes, list) and isinstance(rules, list)
    read = answer.get("reads")
    reads = None
    if isinstance(read, dict):
        reads = Reads(bool(read["output"]), bool(read["correct_answer"]), tuple(str(k) for k in read["app_params"]))
    return Migration(
        code=str(answer["code"]),
        changed=bool(answer["changed"]),
        interface_before=str(answer["interface_before"]),
        interface_after=str(answer["interface_after"]),
        original=request["code"],
        notes=[Note(n.get("line"), str(n["message"])) for n in notes],
        rules=[str(r) for r in rules],
        reads=reads,
    )


def migrate_many(items: Sequence[tuple[str, str, str]]) -> list[Migration | Exception]:
    """Migrate ``(language, code, correct_answer_key)`` items in one Node process; each answer is a
    :class:`Migration` or the error for that item (``DefinitionError`` for the user's code)."""
    if not items:
        return []
    requests = [{"language": lang, "code": code, "correct_answer_key": key} for lang, code, key in items]
    return [_migration(r, a) for r, a in zip(requests, _run(requests), strict=True)]


def migrate_js(language: str, code: str, correct_answer_key: str = "correct_answer") -> Migration:
    """The registry's ``migrator`` of JavaScript and TypeScript (one file)."""
    found = migrate_many([(language, code, correct_answer_key)])[0]
    if isinstance(found, Exception):
        raise found
    return found
