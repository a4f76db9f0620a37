"""pip's install script, kept for the one case uv cannot serve: a platform with no uv binary.

:class:`~evaluator_host.builds.installers.Pip` fills :data:`PIP_SCRIPT` (resolve with ``--dry-run
--report``, then install exactly that lock with ``--require-hashes``); :data:`GUARD` is installed into
pip before it resolves. (uv itself refuses a requirement naming a URL unless the top-level requirements
name it, which exact pins never do.)
"""

from __future__ import annotations

__all__ = ["GUARD", "PIP_SCRIPT"]

# Installed into pip before it resolves: a requirement with a link (``name @ URL``, a VCS URL, a local
# path) is refused before pip prepares it: preparing a direct-URL sdist builds its metadata, running
# its code (even with --only-binary, which does not apply to explicit links). Fails closed: a pip
# without the hook point refuses to run at all.
GUARD = """
def _guard():
    from pip._internal.resolution.resolvelib import factory
    original = factory.Factory._make_requirements_from_install_req
    def guarded(self, ireq, requested_extras):
        link = ireq.link
        if link is not None and ireq.match_markers(requested_extras) and not _allowed(link.url):
            _refuse(ireq.name or "?", link.redacted_url, str(ireq.comes_from or ""))
        return original(self, ireq, requested_extras)
    factory.Factory._make_requirements_from_install_req = guarded
"""

PIP_SCRIPT = """\
import importlib.metadata, json, os, sys, tempfile
from urllib.parse import urlsplit
{forwarder}
if {relay!r}:
    import threading
    threading.Thread(target=forward({relay!r}), name="relay-forwarder", daemon=True).start()
ALLOW = set({allow!r})

def _allowed(url):
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and (parts.hostname or "").lower() in ALLOW

def _refuse(name, url, by):
    sys.stderr.flush()
    print({refused!r} + json.dumps({{"name": name, "url": url, "by": by}}), flush=True)
    os._exit(3)
{guard}
try:
    _guard()
except Exception as exc:
    sys.exit(f"this pip cannot be guarded against direct-URL requirements ({{exc!r}}): refusing to install")
from pip._internal.cli.main import main
scratch = tempfile.mkdtemp()
report = os.path.join(scratch, "report.json")
code = main({resolve!r} + ["--report", report, "-r", {requirements!r}])
if code:
    sys.exit(code)
with open(report) as fh:
    items = json.load(fh).get("install", [])
lines, hashed = [], True
for item in items:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    info = item.get("download_info") or {{}}
    url = info.get("url", "")
    if item.get("is_direct") or "vcs_info" in info or "dir_info" in info:
        if "vcs_info" in info or "dir_info" in info or not _allowed(url):
            _refuse(name, url, "the resolved lock")
        spec = f"{{name}} @ {{url}}"
    else:
        spec = f"{{name}}=={{version}}"
    archive = info.get("archive_info") or {{}}
    sha = (archive.get("hashes") or {{}}).get("sha256")
    if not sha and str(archive.get("hash", "")).startswith("sha256="):
        sha = archive["hash"][len("sha256="):]
    hashed = hashed and bool(sha)
    lines.append((spec, sha))
lock = os.path.join(scratch, "lock.txt")
with open(lock, "w") as fh:
    for spec, sha in lines:
        fh.write(spec + (f" --hash=sha256:{{sha}}" if hashed else "") + "\\n")
install = {install!r}
if not hashed:  # an index that publishes no hashes: exact pins, still no dependency of their own
    install.remove("--require-hashes")
code = main(install + ["-r", lock]) if lines else 0
if code:
    sys.exit(code)
print({lock_mark!r})
for d in importlib.metadata.distributions(path=[{packages_dir!r}]):
    print(d.metadata["Name"] + "==" + d.version)
"""
