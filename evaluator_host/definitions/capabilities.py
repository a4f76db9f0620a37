"""The capability report: what a definition's code reaches for, found statically (nothing runs).

Advisory, never enforcement: it tells the author, at definition time, why a call will fail
(the sandbox has no network, a read-only root, no host environment) or what a reviewer should
look at. Six kinds, each a list of ``{"line", "detail"}`` (1-based lines of the user's code):

``network``       sockets, HTTP clients, ``fetch(``, ``require('http')``, ``urllib.request``, and packages whose
                  work is HTTP calls: model SDKs and judge libraries (``openai``, ``anthropic``,
                  ``litellm``, ``autoevals``, ``langchain*``; npm ``openai``, ``@anthropic-ai/sdk``, …)
``filesystem``    ``open(..., 'w')`` and other writes, deletes, ``fs.*`` / ``pathlib`` / ``shutil``
``subprocess``    ``subprocess``, ``os.system``, ``child_process``, ``multiprocessing``
``environment``   ``os.environ`` / ``os.getenv``, ``process.env``
``dynamic_code``  ``eval``, ``exec``, ``compile``, ``__import__``, ``new Function``, dynamic ``import()``
``native``        ``ctypes``, ``cffi``, ``process.dlopen``, ``.node`` addons, ``WebAssembly``

Python is read from its AST; JavaScript and TypeScript from the text with comments blanked
(and strings blanked where a string cannot be a module name), so ``// fetch(`` never counts.
Each language's scanner is named in its manifest (``capabilities``).
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Any

from evaluator_host.definitions.nesting import parse_python
from evaluator_host.errors import CodeSyntaxError

__all__ = ["KINDS", "Report", "empty", "js_report", "python_report"]

KINDS = ("network", "filesystem", "subprocess", "environment", "dynamic_code", "native")
Report = dict[str, list[dict[str, Any]]]
_MAX_ITEMS = 50  # per kind: a report stays small whatever the code


def empty() -> Report:
    """A report with nothing in it."""
    return {kind: [] for kind in KINDS}


def _add(report: Report, kind: str, line: int, detail: str) -> None:
    items = report[kind]
    if len(items) < _MAX_ITEMS and {"line": line, "detail": detail} not in items:
        items.append({"line": line, "detail": detail})


# -- Python ------------------------------------------------------------------------------

_PY_MODULES: dict[str, str] = {
    **dict.fromkeys(
        "socket ssl http urllib.request urllib3 requests httpx aiohttp websocket websockets ftplib smtplib "
        "poplib imaplib telnetlib xmlrpc asyncio.streams grpc paramiko pycurl".split(),
        "network",
    ),
    # model SDKs and judge libraries: their calls are HTTP requests (issue 48: no false "no network use")
    **dict.fromkeys("openai anthropic litellm autoevals braintrust cohere mistralai groq".split(), "network"),
    **dict.fromkeys("subprocess multiprocessing pty pexpect sh concurrent.futures.process".split(), "subprocess"),
    **dict.fromkeys("shutil tempfile pathlib glob fileinput".split(), "filesystem"),
    **dict.fromkeys("importlib runpy code codeop pickle marshal dill cloudpickle".split(), "dynamic_code"),
    **dict.fromkeys("ctypes cffi _ctypes mmap".split(), "native"),
}
_PY_CALLS: dict[str, str] = {
    **dict.fromkeys("eval exec compile __import__ importlib.import_module".split(), "dynamic_code"),
    **dict.fromkeys(
        "os.system os.popen os.spawnl os.spawnlp os.spawnv os.spawnvp os.execv os.execve os.execvp os.execl "
        "os.execlp os.fork os.forkpty os.posix_spawn os.kill os.killpg".split(),
        "subprocess",
    ),
    **dict.fromkeys("os.getenv os.putenv os.unsetenv os.getenvb".split(), "environment"),
    **dict.fromkeys(
        "os.remove os.unlink os.rmdir os.removedirs os.mkdir os.makedirs os.rename os.replace os.chmod "
        "os.chown os.symlink os.link os.truncate os.listdir os.scandir os.walk".split(),
        "filesystem",
    ),
    **dict.fromkeys("requests.get requests.post requests.request urllib.request.urlopen".split(), "network"),
}
_PY_ATTRS: dict[str, str] = {"os.environ": "environment", "os.environb": "environment"}
_WRITE_METHODS = frozenset({"write_text", "write_bytes", "unlink", "mkdir", "rmdir", "touch", "rename"})


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _open_mode(call: ast.Call) -> str | None:
    mode: ast.AST | None = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
    if mode is None:
        return "r"
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else None


@functools.lru_cache(maxsize=512)
def _python_cached(code: str) -> tuple[tuple[str, int, str], ...]:
    try:
        tree = parse_python(code)
    except CodeSyntaxError:  # detection reports it (and code nested too deeply: nesting.py)
        return ()
    report = empty()
    aliases: dict[str, str] = {}  # local name -> the module (or module.attr) it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.partition(".")[0]] = alias.asname and alias.name or alias.name
                _py_module(report, node.lineno, alias.name, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                _py_module(
                    report, node.lineno, f"{node.module}.{alias.name}", f"from {node.module} import {alias.name}"
                )
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is None:
                continue
            head, _, rest = name.partition(".")
            full = f"{aliases.get(head, head)}.{rest}" if rest else aliases.get(head, head)
            kind = _PY_CALLS.get(full) or _PY_CALLS.get(name)
            if kind:
                _add(report, kind, node.lineno, f"{name}(...)")
            elif full in ("open", "io.open", "builtins.open", "os.open"):
                mode = _open_mode(node) if full != "os.open" else None
                if mode is None or set(mode) & set("wax+"):
                    _add(report, "filesystem", node.lineno, f"{name}(..., {mode!r}) writes" if mode else f"{name}(...)")
                else:
                    _add(report, "filesystem", node.lineno, f"{name}(...) reads a file")
            elif full.partition(".")[0] in ("requests", "httpx", "aiohttp", "urllib3") and rest:
                _add(report, "network", node.lineno, f"{name}(...)")
            elif isinstance(node.func, ast.Attribute) and node.func.attr in _WRITE_METHODS and "Path" in name:
                _add(report, "filesystem", node.lineno, f"{name}(...)")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = _dotted(node)
            if name:
                head, _, rest = name.partition(".")
                full = f"{aliases.get(head, head)}.{rest}" if rest else name
                for attr, kind in _PY_ATTRS.items():
                    if full == attr or full.startswith(attr + "."):
                        _add(report, kind, node.lineno, name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and aliases.get(node.id) in _PY_ATTRS:
            _add(report, _PY_ATTRS[aliases[node.id]], node.lineno, node.id)
    return tuple((kind, item["line"], item["detail"]) for kind in KINDS for item in report[kind])


def _py_module(report: Report, line: int, module: str, detail: str) -> None:
    parts = module.split(".")
    if parts[0].startswith("langchain"):  # langchain, langchain_openai, langchain_core, …: model calls
        _add(report, "network", line, detail)
        return
    for depth in range(len(parts), 0, -1):
        kind = _PY_MODULES.get(".".join(parts[:depth]))
        if kind:
            _add(report, kind, line, detail)
            return


def python_report(code: str) -> Report:
    """The capability report of Python ``code`` (a syntax error: an empty report)."""
    return _expand(_python_cached(code))


# -- JavaScript / TypeScript ---------------------------------------------------------------

_JS_MODULES: dict[str, str] = {
    **dict.fromkeys("http https http2 net tls dgram dns undici axios node-fetch got ws superagent".split(), "network"),
    **dict.fromkeys(  # model SDKs and judge libraries: their calls are HTTP requests
        "openai autoevals braintrust @anthropic-ai/sdk @langchain/openai @langchain/anthropic langchain ai".split(),
        "network",
    ),
    **dict.fromkeys("child_process cluster worker_threads execa cross-spawn".split(), "subprocess"),
    **dict.fromkeys("fs fs/promises fs-extra graceful-fs".split(), "filesystem"),
    **dict.fromkeys("vm module".split(), "dynamic_code"),
    **dict.fromkeys("ffi-napi node-gyp-build bindings wasi".split(), "native"),
}
_JS_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("network", re.compile(r"(?<![\w.$])fetch\s*\("), "fetch(...)"),
    ("network", re.compile(r"\bnew\s+(XMLHttpRequest|WebSocket|EventSource)\b"), "new {0}"),
    ("environment", re.compile(r"\bprocess\s*\.\s*env\b"), "process.env"),
    ("dynamic_code", re.compile(r"(?<![\w.$])eval\s*\("), "eval(...)"),
    ("dynamic_code", re.compile(r"\bnew\s+Function\s*\(|(?<![\w.$])Function\s*\("), "new Function(...)"),
    ("dynamic_code", re.compile(r"(?<![\w.$])import\s*\(\s*(?![\s'\"`])"), "import(...) of a computed specifier"),
    ("dynamic_code", re.compile(r"(?<![\w.$])require\s*\(\s*(?![\s'\"`])"), "require(...) of a computed specifier"),
    ("dynamic_code", re.compile(r"\bset(Timeout|Interval)\s*\(\s*['\"`]"), "set{0}(string)"),
    ("native", re.compile(r"\bprocess\s*\.\s*(dlopen|binding|_linkedBinding)\b"), "process.{0}"),
    ("native", re.compile(r"\bWebAssembly\s*\.\s*(\w+)"), "WebAssembly.{0}"),
    ("subprocess", re.compile(r"\bprocess\s*\.\s*(kill|reallyExit)\b"), "process.{0}"),
    (
        "filesystem",
        re.compile(r"\b(?:fs|fsp|promises)\s*\.\s*(\w*(?:[Ww]rite|[Aa]ppend|[Uu]nlink|rm|[Rr]ename|mkdir|[Cc]opy)\w*)"),
        "fs.{0}",
    ),  # fmt: skip
    ("filesystem", re.compile(r"\b(?:fs|fsp|promises)\s*\.\s*(\w*(?:[Rr]ead|open|[Ee]xists|stat)\w*)"), "fs.{0} reads"),
    ("subprocess", re.compile(r"\b(spawn|spawnSync|exec|execSync|execFile|execFileSync|fork)\s*\("), "{0}(...)"),
)
_SPECIFIER = re.compile(
    r"""(?:\brequire\s*\(\s*|\bimport\s*\(\s*|\bimport\s+(?:type\s+)?(?:[\w*${}\s,]+?\s+from\s+)?|\bexport\s+[\w*{}\s,]+?\s+from\s+)(['"])([^'"\n]+)\1"""
)


def _blank(code: str, keep_strings: bool) -> str:
    """``code`` with comments (and, unless ``keep_strings``, string contents) as spaces; lines kept."""
    out: list[str] = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "/" and code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        elif c in "'\"`":
            j = i + 1
            while j < n and code[j] != c and not (c != "`" and code[j] == "\n"):
                j += 2 if code[j] == "\\" else 1
            j = min(j + 1, n)
            body = code[i:j]
            out.append(body if keep_strings else c + re.sub(r"[^\n]", " ", body[1:-1]) + body[-1:])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _js_cached(code: str) -> tuple[tuple[str, int, str], ...]:
    report = empty()
    with_strings = _blank(code, keep_strings=True)
    bare = _blank(code, keep_strings=False)
    starts = [0] + [m.end() for m in re.finditer("\n", code)]

    def line_of(offset: int) -> int:
        import bisect

        return bisect.bisect_right(starts, offset)

    for match in _SPECIFIER.finditer(with_strings):
        if bare[match.start()] != with_strings[match.start()]:
            continue  # the keyword itself is inside a string literal
        spec = match.group(2)
        name = spec.removeprefix("node:")
        top = "/".join(name.split("/")[:2]) if name.startswith("@") else name.split("/")[0]
        kind = _JS_MODULES.get(name) or _JS_MODULES.get(top)
        if kind is None and name.endswith(".node"):
            kind = "native"
        if kind:
            _add(report, kind, line_of(match.start()), f"{match.group(0).split('(')[0].split()[0]} {spec!r}")
    for kind, pattern, detail in _JS_PATTERNS:
        for match in pattern.finditer(bare):
            _add(report, kind, line_of(match.start()), detail.format(*match.groups()))
    return tuple((kind, item["line"], item["detail"]) for kind in KINDS for item in report[kind])


def js_report(code: str) -> Report:
    """The capability report of JavaScript or TypeScript ``code`` (static, from the text)."""
    return _expand(_js_cached(code))


def _expand(items: tuple[tuple[str, int, str], ...]) -> Report:
    report = empty()
    for kind, line, detail in items:
        report[kind].append({"line": line, "detail": detail})
    for kind in KINDS:
        report[kind].sort(key=lambda item: item["line"])
    return report
