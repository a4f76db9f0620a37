"""uv: the Python installer of package sets, with a shared content-addressed cache, and build progress.

:class:`Uv` is the ``pip`` families' installer whenever the service's uv binary is there
(:func:`uv_binary`: the ``uv`` wheel of the service's own lock, the same static-enough binary on the
host, bound read-only into a build sandbox or build box). Its script (:data:`_UV_SCRIPT`) runs, in
the build sandbox like pip's did, one ``uv pip install`` of exactly the pins:

* with the **shared cache** ``cache`` (``UV_CACHE_DIR``; the store of unpacked wheels every later
  build reuses, :mod:`evaluator_host.builds.store`), wheels only unless source builds are allowed;
* with the host's pip index settings as uv's own (:func:`uv_environment`: ``UV_INDEX_URL``,
  ``UV_EXTRA_INDEX_URL``, ``UV_FIND_LINKS`` (comma-separated, as uv reads it), ``UV_INSECURE_HOST``, ``UV_NO_INDEX``,
  ``UV_HTTP_TIMEOUT``; ``UV_INDEX_STRATEGY=unsafe-best-match``: the best version of all indexes, as
  pip picks it; the CA bundle as ``SSL_CERT_FILE``, which uv trusts besides its own roots);
  the operator's constraints with ``-c``;
* into ``packages_dir`` by ``link`` (``symlink``: a tree of links into the cache the host then
  turns into hard links, :func:`evaluator_host.builds.store.link_tree`; ``copy``: a docker image).

uv never installs a requirement that names a URL unless the top-level requirements name it (they
are exact pins only), so pip's guard against direct-URL requirements is not needed: uv refuses them
itself ("URL dependencies must be expressed as direct requirements").

While it runs the script prints :data:`PROGRESS_MARK` lines (``{"phase": "resolving" |
"downloading" | "installing", "done": n, "total": N}``) read by :func:`progress` from the live log:
``downloading n/N`` counts the distributions uv found missing from the cache and the new entries
its archive has gained so far. Installed, it prints :data:`~evaluator_host.builds.installers.HASH_MARK` and
JSON ``{"Name==version": ["sha256:…", …]}``: each installed package's archive hashes, as ``uv pip compile
--generate-hashes`` (pylock format) answers from the index's simple API (cached), the installed wheel's first
(uv's cache names it: ``wheels-v*/<index>/<name>/<version>-<tags>``), then the version's other files for
this interpreter — of a wheels-only install (``--no-build``, the shared store's) its wheels only, as that
install could use nothing else. Their resolution runs **beside the install** (the pins' whole resolution,
wheels only: no package code runs) and is taken when it names exactly the installed versions; else (or
when sdists may be built) a ``--no-deps`` compile of exactly the installed versions runs after the
install. {} when that fails (the build does not).
Then :data:`~evaluator_host.builds.installers.LOCK_MARK` and the lock.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

__all__ = [
    "NEEDS_SOURCES",
    "PHASES",
    "PROGRESS_MARK",
    "Progress",
    "progress",
    "summary",
    "uv_binary",
    "uv_environment",
    "uv_script",
    "without_progress",
]

PROGRESS_MARK = "----evaluator-host-progress----"
# uv's words when a pin has no wheel and builds are off (``--no-build``, how shared installs run)
NEEDS_SOURCES = "building from source is disabled"
Progress = dict[str, object]


def uv_binary() -> str | None:
    """The service's uv (``uv`` wheel of the lock, next to the interpreter), else one on PATH, else None."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def uv_environment(pip_config: dict[str, str], cert: str | None) -> dict[str, str]:
    """uv's spelling of the host's pip index settings (already without credentials), and the CA bundle."""
    # every index's versions, the best match among them: what pip does with the same settings
    env: dict[str, str] = {"UV_NO_PROGRESS": "1", "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    if pip_config.get("index-url"):
        env["UV_INDEX_URL"] = pip_config["index-url"]
    if pip_config.get("extra-index-url"):
        env["UV_EXTRA_INDEX_URL"] = pip_config["extra-index-url"]
    if pip_config.get("find-links"):
        # uv reads UV_FIND_LINKS as a comma-separated list (a space-separated one is one path that
        # does not exist: every build failed with two entries); pip's setting is whitespace-separated
        env["UV_FIND_LINKS"] = ",".join(pip_config["find-links"].split())
    if pip_config.get("trusted-host"):
        env["UV_INSECURE_HOST"] = pip_config["trusted-host"]
    if pip_config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        env["UV_NO_INDEX"] = "1"
    timeout = pip_config.get("timeout") or pip_config.get("default-timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout
    if cert:
        env["SSL_CERT_FILE"] = cert
    return env


_UV_SCRIPT = """\
import json, os, subprocess, sys, threading, time  # (what uv's start needs: the rest is imported while it runs)
{forwarder}
if {relay!r}:
    threading.Thread(target=forward({relay!r}), name="relay-forwarder", daemon=True).start()
MARK, ARCHIVE = {progress!r}, os.path.join({cache!r}, "archive-v0")
state = {{"phase": "resolving", "done": 0, "total": 0}}
shown, began = [], time.monotonic()

def say():
    now = dict(state)
    if not shown or shown[-1] != now:
        shown.append(now)
        print(MARK + json.dumps({{**now, "t": round(time.monotonic() - began, 2)}}), flush=True)

def entries():
    try:
        return len(os.listdir(ARCHIVE))
    except OSError:
        return 0

def watch(start, stop):
    while not stop.wait(0.25):
        if state["phase"] == "downloading":
            state["done"] = min(state["total"], max(0, entries() - start))
            say()

def key(line):
    name, _, version = line.partition("==")
    return re.sub(r"[-_.]+", "-", name).lower() + "==" + version

def parse(toml, installed):
    found, wanted = {{}}, {{key(k): k for k in installed}}
    for block in toml.split("[[packages]]")[1:]:
        name, version = re.search(r'^name = "([^"]+)"', block, re.M), re.search(r'^version = "([^"]+)"', block, re.M)
        if not (name and version):
            continue
        files = re.findall(r'url = "[^"]*/([^"/]+)"[^}}]*?hashes = \\{{ sha256 = "([0-9a-f]{{64}})"', block)
        found_key = wanted.get(key(name.group(1) + "==" + version.group(1)))
        if found_key is None or not files:
            continue
        # the wheel installed first: uv's cache names it (<name>/<version>-<tags>.http under wheels-v*)
        cached = {{os.path.basename(p)[: -len(".http")] for p in glob.glob(os.path.join(
            {cache!r}, "wheels-v*", "*", re.sub(r"[-_.]+", "-", name.group(1)).lower(), version.group(1) + "-*.http"))}}
        ranked = sorted(files, key=lambda f: not any(f[0].endswith("-" + c + ".whl") for c in cached))
        found[found_key] = ["sha256:" + digest for _, digest in ranked]
    return found

def hashes(ahead):
    found_in = importlib.metadata.distributions(path=[{packages_dir!r}])
    installed = [d.metadata["Name"] + "==" + d.version for d in found_in]
    if ahead is not None:  # resolved beside the install: used when it names exactly what was installed
        found = parse(ahead, installed)
        if len(found) == len(installed):
            return found
    try:
        toml = subprocess.run({compile!r}, input="\\n".join(installed) + "\\n", capture_output=True, text=True,
                              timeout=120, errors="replace").stdout
    except (OSError, subprocess.SubprocessError):
        return {{}}
    return parse(toml, installed)

ahead = {{"proc": None, "toml": None}}

def resolve_ahead():  # the pins' whole resolution with hashes, while the install runs (no package code runs)
    try:
        ahead["proc"] = subprocess.Popen({ahead!r}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         errors="replace")
        out, _ = ahead["proc"].communicate(timeout=120)
        ahead["toml"] = out if ahead["proc"].returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        ahead["toml"] = None
        if ahead["proc"] is not None:
            ahead["proc"].kill()

say()
start, stop = entries(), threading.Event()
threading.Thread(target=watch, args=(start, stop), daemon=True).start()
beside = threading.Thread(target=resolve_ahead, daemon=True)
if {ahead!r}:
    beside.start()
proc = subprocess.Popen({command!r}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
import glob, importlib.metadata, re, shutil  # (while uv starts)
for line in proc.stderr:
    text = line.rstrip("\\n")
    if text.startswith("DEBUG "):
        if "Identified uncached distribution" in text:
            state.update(phase="downloading", total=state["total"] + 1)
            say()
        continue
    if not text.startswith("Using CPython "):  # (the interpreter's path: nothing a user can act on)
        print(text, file=sys.stderr, flush=True)
    if text.startswith(("Prepared ", "Installed ", "Audited ")) and state["phase"] != "installing":
        state.update(phase="installing", done=state["total"])
        say()
code = proc.wait()
stop.set()
if code and beside.is_alive():  # (the install failed: its resolution beside it is not needed)
    try:
        ahead["proc"].kill()
    except (AttributeError, OSError):
        pass
if not code:
    state["phase"] = "finishing"  # installed: the host links the runtime (process) or commits it (docker)
    say()
# (listed while the hashes' resolution beside the install may still be finishing)
if not code and {manifest!r}:  # the tree of links, as data the host checks (its other files copied beside)
    links, files, folders = {{}}, [], [({packages_dir!r}, "")]
    while folders:  # (scandir: a link is known from its folder's listing, without a stat of its own)
        folder, prefix = folders.pop()
        with os.scandir(folder) as listing:
            for item in listing:
                rel = prefix + item.name
                if item.is_symlink():
                    links[rel] = os.readlink(item.path)
                elif item.is_dir():
                    folders.append((item.path, rel + "/"))
                else:
                    files.append(rel)
                    os.makedirs(os.path.dirname(os.path.join({manifest!r} + ".files", rel)), exist_ok=True)
                    shutil.copyfile(item.path, os.path.join({manifest!r} + ".files", rel))
    with open({manifest!r}, "w") as fh:
        json.dump({{"links": links, "files": files}}, fh)
if not code:  # each installed package's archive hashes, while the cache is still there
    try:
        if beside.ident:
            beside.join(timeout=120)
        found = hashes(ahead["toml"])
    except Exception:  # (an unexpected answer of uv's: the runtime has no hashes, the build still stands)
        found = {{}}
    print({hash_mark!r} + json.dumps(found), flush=True)
if {private!r}:  # a cache of this build's own: nothing of it stays (a box's /tmp would be committed)
    shutil.rmtree({cache!r}, ignore_errors=True)
if code:
    sys.exit(code)
print({lock_mark!r})
for d in importlib.metadata.distributions(path=[{packages_dir!r}]):
    print(d.metadata["Name"] + "==" + d.version)
"""


def uv_script(
    *,
    uv: str,
    python: str,
    cache: str,
    requirements: str,
    packages_dir: str,
    link: str,
    sources: bool,
    constraint: str | None,
    forwarder: str,
    relay: str | None,
    lock_mark: str,
    hash_mark: str,
    private: bool = False,
    manifest: str | None = None,
) -> str:
    """The install script (see the module docstring); ``private``: ``cache`` is this build's own,
    removed when uv ends; ``manifest``: where to write the tree uv made in ``packages_dir`` (links
    and the other files' names, JSON; those files are copied to ``<manifest>.files/``)."""
    command = [uv, "pip", "install", "-v", "--python", python, "--cache-dir", cache, "--target", packages_dir]
    command += ["--link-mode", link, "--no-config", "--no-python-downloads", "-r", requirements]
    if not sources:  # no package code runs: nothing is built, not even an sdist's metadata
        command += ["--no-build"]
    if constraint:
        command += ["-c", constraint]
    common = ["--python", python, "--cache-dir", cache, "--no-config", "--no-python-downloads", "--generate-hashes"]
    common += ["--format", "pylock.toml", "-q"]
    if not sources:  # a wheels-only install: its hashes are its version's wheels (no sdist: never built)
        common += ["--no-build"]
    compile_ = [uv, "pip", "compile", "-", "--no-deps", *common]
    # wheels only: the same resolution as the install's, with hashes, beside it (when sdists may be built,
    # after it, so that no sdist is built twice)
    ahead = [uv, "pip", "compile", requirements, *common] if not sources else []
    if ahead and constraint:
        ahead += ["-c", constraint]
    return _UV_SCRIPT.format(
        ahead=ahead,
        compile=compile_,
        hash_mark=hash_mark,
        forwarder=forwarder if relay else "",
        relay=relay,
        progress=PROGRESS_MARK,
        cache=cache,
        command=command,
        lock_mark=lock_mark,
        packages_dir=packages_dir,
        private=private,
        manifest=manifest,
    )


PHASES = ("resolving", "downloading", "installing", "finishing")


def _reports(text: str) -> list[dict[str, object]]:
    found = []
    for line in text.splitlines():
        if not line.startswith(PROGRESS_MARK):
            continue
        try:
            item = json.loads(line[len(PROGRESS_MARK) :])
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("phase") in PHASES:
            found.append(item)
    return found


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def progress(text: str) -> Progress | None:
    """The last progress a build's log reported (None: none yet, or an installer that reports none)."""
    reports = _reports(text)
    if not reports:
        return None
    last = reports[-1]
    return {"phase": last["phase"], "done": _count(last.get("done")), "total": _count(last.get("total"))}


def summary(text: str) -> str:
    """A finished build's phases, for ``X-Runtime-Build``: ``resolving=0.4s; downloading=12/12 in 6.0s;
    installing=1.2s`` (each from its first report to the next phase's; '' when none was reported)."""
    firsts: dict[str, dict[str, object]] = {}
    for item in _reports(text):
        phase = str(item["phase"])
        firsts.setdefault(phase, item)
        if phase == "downloading":
            firsts[phase] = {**item, "t": firsts[phase].get("t")}
    parts, ordered = [], [p for p in PHASES if p in firsts and isinstance(firsts[p].get("t"), int | float)]
    for index, phase in enumerate(ordered):
        start = float(firsts[phase]["t"])  # type: ignore[arg-type]
        end = float(firsts[ordered[index + 1]]["t"]) if index + 1 < len(ordered) else None  # type: ignore[arg-type]
        took = "" if end is None else f"{end - start:.1f}s"
        if phase == "downloading":
            item = firsts[phase]
            counted = f"{_count(item.get('total'))}"
            parts.append(f"downloading={counted}" + (f" in {took}" if took else ""))
        elif took:
            parts.append(f"{phase}={took}")
    return "; ".join(parts)


def without_progress(text: str) -> str:
    """A build log without its progress reports (what a user reads)."""
    return "\n".join(line for line in text.split("\n") if not line.startswith(PROGRESS_MARK))
