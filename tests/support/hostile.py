"""The hostile table: one row per hostile behaviour, written in each language it makes sense in, with
the status the evaluation must end in and what else must hold (run by ``tests/compliance/test_hostile.py``;
its Python rows also by ``test_restricted.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Result = dict[str, Any]
Check = Callable[[Result], bool]

MIB = 1024 * 1024
#: Environment variable names no evaluator may see, whatever its language.
HOST_ONLY_ENV = ("EVALUATOR_HOST", "PIP_", "NODE_", "NPM", "AWS", "OPENAI")


@dataclass(frozen=True)
class Code:
    """One language's evaluator for a row: its source, the request's extra fields, and a check of its own."""

    source: str
    settings: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    cases: list[dict[str, Any]] | None = None
    check: Check | None = None

    def body(self) -> dict[str, Any]:
        """The extra request fields this evaluation posts (only those given)."""
        fields = {"settings": self.settings, "inputs": self.inputs, "cases": self.cases}
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class Case:
    """A hostile behaviour: each language's evaluator, the status it must end in, and what else must hold.

    ``status`` None asserts no status (the service's health afterwards is the point). ``then``
    is a second evaluation per language, run right after the first, that must answer ``ok``
    and pass its own check: what the first one left behind (a worker, a process, a file).
    """

    name: str
    status: str | None
    code: dict[str, Code]
    check: Check | None = None
    then: dict[str, Code] | None = None
    needs_own_pid_namespace: bool = False
    host_env: dict[str, str] | None = None


PY_SPAWN_THEN_COUNT = (
    "import os, time\n\ndef evaluate(inputs, outputs, trace):\n"
    "    if inputs.get('spawn'):\n"
    "        if os.fork() == 0:\n            while True: pass\n"  # a busy child
    "        for _ in range(2):\n            if os.fork() == 0:\n"  # busy orphans (double fork + setsid)
    "                os.setsid()\n                if os.fork() == 0:\n                    while True: pass\n"
    "                os._exit(0)\n        time.sleep(0.2)\n        return 1\n"
    "    others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (os.getpid(), 1)]\n"
    "    return {'score': 1, 'others': len(others)}\n"
)
JS_SPAWN_THEN_COUNT = (
    "const cp = require('child_process'), fs = require('fs')\n"
    "function evaluate(inputs, o, t) {\n"
    "  if (inputs.spawn) { for (let k = 0; k < 3; k++) cp.spawn('sh', ['-c', 'while :; do :; done'], "
    "{ detached: true, stdio: 'ignore' }).unref(); return 1 }\n"
    "  const live = (p) => { try { return !/^\\d+ \\(.*\\) Z/.test(fs.readFileSync(`/proc/${p}/stat`, 'utf8')) }"
    " catch { return false } }\n"
    "  const others = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p) && "
    "![process.pid, 1].includes(Number(p)) && live(p))\n"
    "  return { score: 1, others: others.length }\n}\n"
)
PY_EXIT_ON_DIE = (
    "import os\n\ndef evaluate(inputs, outputs, trace):\n    if inputs.get('die'):\n        os._exit(7)\n    return 1\n"
)
JS_EXIT_ON_DIE = (
    "globalThis.calls = (globalThis.calls || 0) + 1\n"
    "function evaluate(inputs, o, t) {\n  if (inputs.die) process.exit(7)\n"
    "  return { score: 1, calls: globalThis.calls }\n}\n"
)
BATCH_DIES_ON_THE_SECOND_CASE = [{"inputs": {}}, {"inputs": {"die": True}}, {"inputs": {}}, {"inputs": {}}]


def batch_statuses(*expected: str) -> Check:
    """A check that a batch answered one result per case, with these statuses in order."""
    return lambda result: [r["status"] for r in result["results"]] == list(expected)


HOSTILE = [
    Case(
        "infinite_loop_times_out",
        "timeout",
        {
            "python": Code("def evaluate(inputs, outputs, trace):\n    while True:\n        pass\n", {"timeout_s": 1}),
            "javascript": Code("function evaluate(i, o, t) { for (;;) {} }", {"timeout_s": 1}),
        },
    ),
    Case(
        "await_that_never_settles_times_out",
        "timeout",
        {
            "python": Code(
                "import asyncio\n\nasync def evaluate(inputs, outputs, trace):\n    await asyncio.Event().wait()\n",
                {"timeout_s": 0.5},
            ),
            "javascript": Code(
                "async function evaluate(i, o, t) { await new Promise(() => {}); return 1 }", {"timeout_s": 1}
            ),
        },
    ),
    Case(
        "memory_bomb_in_a_loop",
        "memory_limit",
        {
            "python": Code(
                "def evaluate(inputs, outputs, trace):\n    s = []\n    while True:\n        s.append('x' * 10**6)\n",
                {"memory_mb": 64, "timeout_s": 10},
            ),
            "javascript": Code(  # V8's heap: strings
                "function evaluate(i, o, t) { const a = []; for (;;) a.push('x'.repeat(1e6) + Math.random()) }",
                {"memory_mb": 128, "timeout_s": 20},
            ),
        },
    ),
    Case(
        "processes_a_case_starts_do_not_outlive_it",  # busy children and orphans are killed before the next case
        "ok",
        {
            "python": Code(PY_SPAWN_THEN_COUNT, inputs={"spawn": True}),
            "javascript": Code(JS_SPAWN_THEN_COUNT, inputs={"spawn": True}),
        },
        then={  # the same revision: the same warm worker
            "python": Code(PY_SPAWN_THEN_COUNT, check=lambda r: r["details"]["others"] == 0),
            "javascript": Code(JS_SPAWN_THEN_COUNT, check=lambda r: r["details"]["others"] == 0),
        },
        needs_own_pid_namespace=True,
    ),
    Case(
        "stdout_flood_is_truncated",
        "output_limit",
        {
            "python": Code(
                "def evaluate(inputs, outputs, trace):\n    while True:\n        print('x' * 10000)\n",
                {"timeout_s": 10},
            ),
            "javascript": Code(
                "function evaluate(i, o, t) { for (;;) console.log('x'.repeat(10000)) }", {"timeout_s": 10}
            ),
        },
        check=lambda r: r["truncated"] is True and len(r["stdout"]) <= MIB,
    ),
    Case(
        "raw_fd_flood",
        "output_limit",
        {
            "python": Code(
                "import os\n\ndef evaluate(inputs, outputs, trace):\n"
                "    while True:\n        os.write(1, b'y' * 65536)\n",
                {"timeout_s": 10},
            ),
            "javascript": Code(
                "const fs = require('fs')\n"
                "function evaluate(i, o, t) { const b = Buffer.alloc(65536, 121); for (;;) fs.writeSync(1, b) }",
                {"timeout_s": 10},
            ),
        },
    ),
    Case(
        "flood_that_catches_the_limit_still_fails",
        "output_limit",
        {
            "python": Code(
                "def evaluate(inputs, outputs, trace):\n    for _ in range(300):\n        try:\n"
                "            print('z' * 10000)\n        except BaseException:\n            pass\n    return 1\n"
            ),
            "javascript": Code(
                "function evaluate(i, o, t) {\n"
                "  for (let k = 0; k < 300; k++) { try { console.log('z'.repeat(10000)) } catch {} }\n"
                "  return 1\n}\n"
            ),
        },
    ),
    Case(
        "huge_return_value",
        "output_limit",
        {
            "python": Code(
                "def evaluate(inputs, outputs, trace):\n    return {'score': 1, 'blob': 'x' * (3 * 1024 * 1024)}\n"
            ),
            "javascript": Code("function evaluate(i, o, t) { return { score: 1, blob: 'x'.repeat(3 * 1024 * 1024) } }"),
        },
    ),
    Case(
        "exit_is_an_error_and_the_next_call_gets_a_fresh_worker",
        "error",
        {
            "python": Code(PY_EXIT_ON_DIE, inputs={"die": True}, check=lambda r: "exited" in r["error"]["message"]),
            "javascript": Code(
                JS_EXIT_ON_DIE,
                inputs={"die": True},
                check=lambda r: r["error"]["type"] == "ProcessExit" and "process.exit(7)" in r["error"]["message"],
            ),
        },
        then={
            "python": Code(PY_EXIT_ON_DIE, inputs={}),
            # the module was loaded again: a fresh worker
            "javascript": Code(JS_EXIT_ON_DIE, inputs={}, check=lambda r: r["details"]["calls"] == 1),
        },
    ),
    Case(
        "batch_after_an_exit_runs_on_a_fresh_worker",
        None,  # a batch answers one result per case
        {
            "python": Code(
                "import os\n\ndef evaluate(inputs, outputs, trace):\n    if inputs.get('die'):\n"
                "        os._exit(1)\n    return 1\n",
                cases=BATCH_DIES_ON_THE_SECOND_CASE,
            ),
            "javascript": Code(
                "function evaluate(inputs, o, t) { if (inputs.die) process.exit(1); return 1 }",
                cases=BATCH_DIES_ON_THE_SECOND_CASE,
            ),
        },
        check=batch_statuses("ok", "error", "ok", "ok"),
    ),
    Case(
        "killing_the_parent",
        None,
        {
            "python": Code(
                "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n"
                "    os.kill(os.getppid(), signal.SIGKILL)\n    return 1\n"
            ),
            "javascript": Code("function evaluate(i, o, t) { process.kill(process.ppid, 'SIGKILL'); return 1 }"),
        },
    ),
    Case(
        "kill_everything",
        None,
        {
            "python": Code(
                "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n"
                "    os.kill(-1, signal.SIGKILL)\n    return 1\n"
            ),
            "javascript": Code("function evaluate(i, o, t) { try { process.kill(-1, 'SIGKILL') } catch {} return 1 }"),
        },
    ),
    Case(
        "host_environment_is_not_visible",
        "ok",
        {
            "python": Code(
                "import os\n\ndef evaluate(inputs, outputs, trace):\n    environ = ''\n"
                "    for path in ('/proc/self/environ', '/proc/1/environ'):\n"
                "        try:\n            environ += open(path).read()\n        except OSError:\n            pass\n"
                "    return {'score': 0.0 if 's3cr3t' in environ or "
                "'EVALUATOR_HOST_TEST_SECRET' in os.environ else 1.0, 'keys': sorted(os.environ)}\n"
            ),
            "javascript": Code(
                "const fs = require('fs')\nfunction evaluate(i, o, t) {\n  let environ = ''\n"
                "  for (const p of ['/proc/self/environ', '/proc/1/environ']) {\n"
                "    try { environ += fs.readFileSync(p, 'utf8') } catch {}\n  }\n"
                "  const leaked = environ.includes('s3cr3t') || 'EVALUATOR_HOST_TEST_SECRET' in process.env\n"
                "  return { score: leaked ? 0 : 1, keys: Object.keys(process.env).sort() }\n}\n"
            ),
        },
        check=lambda r: r["score"] == 1.0 and not any(k.startswith(HOST_ONLY_ENV) for k in r["details"]["keys"]),
        host_env={"EVALUATOR_HOST_TEST_SECRET": "s3cr3t"},
    ),
    Case(
        "writes_outside_tmp_fail_and_tmp_works",
        "ok",
        {
            "python": Code(
                "import os\n\ndef evaluate(inputs, outputs, trace):\n    escaped = []\n"
                "    for path in ['/evil', '/usr/evil', '/etc/evil', '/sandbox/code/evil', '/sandbox/runtimes/evil']:\n"
                "        try:\n            open(path, 'w').write('x')\n            escaped.append(path)\n"
                "        except OSError:\n            pass\n"
                "    open('/tmp/ok', 'w').write('fine')\n"
                "    return {'score': 0.0 if escaped else 1.0, 'escaped': escaped}\n"
            ),
            "javascript": Code(
                "const fs = require('fs')\nfunction evaluate(i, o, t) {\n"
                "  const escaped = ['/evil', '/usr/evil', '/etc/evil', '/sandbox/code/evil', '/sandbox/runtimes/evil']"
                ".filter((p) => { try { fs.writeFileSync(p, 'x'); return true } catch { return false } })\n"
                "  fs.writeFileSync('/tmp/ok', 'fine')\n  return { score: escaped.length ? 0 : 1, escaped }\n}\n"
            ),
        },
        check=lambda r: r["score"] == 1.0,
    ),
    Case(
        "no_state_leaks_between_evaluators",  # files in /tmp (and /dev/shm), globals: written, then looked for
        "ok",
        {
            "python": Code(
                "import builtins\n\ndef evaluate(inputs, outputs, trace):\n"
                "    open('/tmp/leak', 'w').write('secret')\n    open('/dev/shm/leak', 'w').write('secret')\n"
                "    builtins.LEAK = 'secret'\n    return 1\n"
            ),
            "javascript": Code(
                "const fs = require('fs')\nfunction evaluate(i, o, t) {\n  fs.writeFileSync('/tmp/leak-js', 'secret')\n"
                "  globalThis.LEAK = 'secret'\n  return 1\n}\n"
            ),
        },
        then={
            "python": Code(
                "import builtins, os\n\ndef evaluate(inputs, outputs, trace):\n"
                "    seen = [os.path.exists('/tmp/leak'), os.path.exists('/dev/shm/leak'), hasattr(builtins, 'LEAK')]\n"
                "    return {'score': 0.0 if any(seen) else 1.0, 'seen': seen}\n",
                check=lambda r: r["score"] == 1.0,
            ),
            "javascript": Code(
                "const fs = require('fs')\nfunction evaluate(i, o, t) {\n"
                "  const seen = [fs.existsSync('/tmp/leak-js'), 'LEAK' in globalThis]\n"
                "  return { score: seen.some(Boolean) ? 0 : 1, seen }\n}\n",
                check=lambda r: r["score"] == 1.0,
            ),
        },
    ),
    Case(
        "no_network",  # loopback, public and private addresses (and, in JavaScript, fetch)
        "ok",
        {
            "python": Code(
                "import socket\n\ndef evaluate(inputs, outputs, trace):\n    reached = []\n"
                "    for host, port in [('127.0.0.1', 8000), ('1.1.1.1', 443), ('10.0.0.1', 80)]:\n"
                "        try:\n            socket.create_connection((host, port), timeout=1).close()\n"
                "            reached.append(host)\n        except OSError:\n            pass\n"
                "    return {'score': 0.0 if reached else 1.0, 'reached': reached}\n"
            ),
            "javascript": Code(
                "const net = require('net')\n"
                "function tryConnect(host, port) {\n  return new Promise((resolve) => {\n"
                "    const s = net.connect({ host, port, timeout: 1000 })\n"
                "    s.on('connect', () => { s.destroy(); resolve(true) })\n"
                "    s.on('error', () => resolve(false)); s.on('timeout', () => { s.destroy(); resolve(false) })\n"
                "  })\n}\n"
                "async function evaluate(i, o, t) {\n  const reached = []\n"
                "  for (const [h, p] of [['127.0.0.1', 8000], ['1.1.1.1', 443], ['10.0.0.1', 80]]) {\n"
                "    if (await tryConnect(h, p)) reached.push(h)\n  }\n  let fetched = false\n"
                "  try { await fetch('https://pypi.org', { signal: AbortSignal.timeout(2000) }); fetched = true }"
                " catch {}\n"
                "  return { score: reached.length || fetched ? 0 : 1, reached, fetched }\n}\n",
                {"timeout_s": 15},
            ),
        },
        check=lambda r: r["score"] == 1.0,
    ),
    Case(
        "only_a_loopback",  # a network namespace of the worker's own: no interface of the host's is there
        "ok",
        {
            "python": Code(
                "def evaluate(inputs, outputs, trace):\n"
                "    names = [line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]]\n"
                "    return {'score': 1.0 if names == ['lo'] else 0.0, 'names': names}\n"
            ),
        },
        check=lambda r: r["score"] == 1.0,
    ),
    Case(
        "stdin_is_empty",
        "ok",
        {
            "python": Code("import sys\n\ndef evaluate(inputs, outputs, trace):\n    return sys.stdin.read() == ''\n"),
            "javascript": Code(
                "const fs = require('fs')\nfunction evaluate(i, o, t) { return fs.readFileSync(0, 'utf8') === '' }\n"
            ),
        },
        check=lambda r: r["score"] == 1.0,
    ),
    Case(
        "import_time_failure_reports_the_line",
        "error",
        {
            "python": Code(
                "x = 1\nraise RuntimeError('broken at import')\n\n"
                "def evaluate(inputs, outputs, trace):\n    return 1\n",
                check=lambda r: r["error"]["type"] == "RuntimeError",
            ),
            "javascript": Code(
                "const x = 1\nthrow new RangeError('broken at import')\nfunction evaluate(i, o, t) { return 1 }\n",
                check=lambda r: r["error"]["type"] == "RangeError",
            ),
            # the line is the TypeScript source's, not the compiled JavaScript's
            "typescript": Code(
                "const x: number = 1\nthrow new RangeError('broken at import')\n"
                "function evaluate(i: unknown, o: unknown, t: unknown): number { return 1 }\n",
                check=lambda r: r["error"]["type"] == "RangeError",
            ),
        },
        check=lambda r: r["error"]["line"] == 2,
    ),
]

# Issue 47, finding 1 as filed: the built-in metric SDK's model_dump handed out a function's __globals__
# (tests/compliance/test_restricted.py, tests/sandbox/test_process_landlock.py)
ISSUE47_METRIC = """
import functools
from nemo_evaluator_sdk import DatasetRow, Metric, MetricOutput, MetricOutputSpec, MetricResult


class Escape(Metric):
    type = "escape"

    def output_spec(self):
        return [MetricOutputSpec.label("out")]

    def compute_scores(self, input):
        C = type('C', (), {'_fields': ('__glo' + 'bals__',)})
        functools.update_wrapper(DatasetRow.model_dump, C)
        dumped = DatasetRow.model_dump(DatasetRow.model_dump)
        out = []

        def on_builtin(e, b):
            if getattr(e, '__name__', '') == 'eval':
                out.append(e("__imp" + "ort__('os').popen('id').read()", {'__builtins__': b}))

        def on_global(b):
            if type(b) is dict and 'eval' in b:
                list(map(lambda e: on_builtin(e, b), b.values()))

        list(map(lambda g: list(map(on_global, g.values())), dumped.values()))
        return MetricResult(outputs=[MetricOutput(name="out", value=str(out))])
"""
