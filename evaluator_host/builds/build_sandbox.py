"""The build sandbox's outside: what an install may reach and read, on both backends.

Anything that can run package code (pip resolving and building an sdist) runs in a build sandbox:
the process backend's namespaces (a private root, an unprivileged uid, a network namespace of its
own) or a build box (docker: an unprivileged uid, ``network_mode=none``). Neither has a network
interface; its one way out is a :class:`~evaluator_host.builds.build_relay.BuildRelay` (the relay
itself lives in :mod:`evaluator_host.builds.build_relay`): a unix socket on the host, bound into the
sandbox, which an in-sandbox forwarder (:data:`FORWARDER`, on ``127.0.0.1:3128``, named by
``HTTP(S)_PROXY``) carries bytes to. The relay lets through ``CONNECT host:port`` and plain
``http://host:port/…`` requests to the **configured index hosts** only (pip's index-url,
extra-index-url and find-links URLs, npm's registry, and ``build_allow_hosts``), and nothing else.

What an install reads of the host's package-manager settings reaches it as a generated
``pip.conf`` / ``npmrc`` (:func:`pip_conf`, :func:`npmrc`): credentials (``user:token@`` in a URL,
npm auth tokens) are never written into it — the sandbox runs package code, which could read and
send them. A pip index whose URL carries credentials is reached through the relay instead
(:func:`~evaluator_host.builds.build_relay.relay_credentials`): the sandbox's ``pip.conf`` names it as plain ``http://host:port/…``
(a trusted host), and the relay — on the host — opens the real connection (TLS when the index is
``https``, verified against the CA bundle) and adds the ``Authorization`` header to each request.
The sandbox can use the index, never learn its credentials. (Absolute ``https://`` file links an
index page gives for its own host go through ``CONNECT``, without them: use relative links.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from evaluator_host.definitions.languages import RUNTIMES_DIR

__all__ = [
    "FORWARDER",
    "IN_SANDBOX_PROXY",
    "PIP_KEYS",
    "allowed_hosts",
    "build_uid",
    "direct_hosts",
    "host_pip_config",
    "local_index_paths",
    "npmrc",
    "pip_conf",
    "proxy_environment",
    "registry_hosts",
    "scrub_url",
]

IN_SANDBOX_PORT = 3128
IN_SANDBOX_PROXY = f"http://127.0.0.1:{IN_SANDBOX_PORT}"
# what of pip's settings an install gets ("proxy": the sandbox's way out is the relay instead)
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "timeout", "retries", "no-index")

# The in-sandbox forwarder: 127.0.0.1:3128 -> the relay's unix socket (bytes only; every decision is
# the relay's, on the host). The same forwarder as an egress worker's: the Python harness's own module,
# shipped as text (``forward(path)`` answers its loop; ``python3 forward.py --daemon SOCKET`` listens,
# forks into the background and returns once listening).
FORWARDER = (RUNTIMES_DIR / "python" / "evaluator_harness" / "egress.py").read_text()


def proxy_environment() -> dict[str, str]:
    """The environment that sends an install's every request to the in-sandbox forwarder."""
    return {
        "HTTP_PROXY": IN_SANDBOX_PROXY,
        "HTTPS_PROXY": IN_SANDBOX_PROXY,
        "http_proxy": IN_SANDBOX_PROXY,
        "https_proxy": IN_SANDBOX_PROXY,
        "NO_PROXY": "",
        "no_proxy": "",
    }


def scrub_url(url: str) -> str:
    """``url`` without its userinfo (``https://user:token@host/`` → ``https://host/``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _scrub_value(value: str) -> str:
    return " ".join(scrub_url(item) for item in value.split())


def host_pip_config(python: str = sys.executable) -> dict[str, str]:
    """The host's effective pip settings builds get (``pip config list``), of :data:`PIP_KEYS` and
    ``constraint``; environment (``PIP_*``) values win over files, as in pip itself. ``cert`` is left
    out: builds get the CA bundle setting instead."""
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^([^.=]*)\.([a-z-]+)='(.*)'$", line.strip())
        if not match or match.group(2) not in (*PIP_KEYS, "proxy", "constraint"):
            continue
        (env if match.group(1) == ":env:" else files)[match.group(2)] = match.group(3)
    return {**files, **env}


def local_index_paths(config: dict[str, str]) -> list[str]:
    """Host folders named by the pip settings (file:// indexes, find-links dirs)."""
    paths = []
    for key in ("index-url", "extra-index-url", "find-links"):
        for item in config.get(key, "").split():
            path = item[len("file://") :] if item.startswith("file://") else item
            if path.startswith("/") and os.path.isdir(path):
                path = os.path.realpath(path)
                # a PEP 503 tree ("<root>/simple") links its files relative to <root>
                paths.append(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
    return sorted(set(paths))


def pip_conf(config: dict[str, str], *, cert: str | None, constraint: str | None) -> str:
    """A ``pip.conf`` for a build sandbox: the host's index settings without credentials or proxy
    (``cert``: the CA bundle's in-sandbox path; ``constraint``: the constraints file's)."""
    lines = ["[global]", "no-input = true", "disable-pip-version-check = true"]
    lines += [f"{key} = {_scrub_value(value)}" for key, value in config.items() if key in PIP_KEYS]
    if cert:
        lines.append(f"cert = {cert}")
    if constraint:
        lines.append(f"constraint = {constraint}")
    return "\n".join(lines) + "\n"


def npmrc(config: dict[str, str], *, cafile: str | None) -> str:
    """An ``npmrc`` for a build sandbox: the host's registries without credentials or proxies."""
    lines = [
        f"{key}={scrub_url(value)}"
        for key, value in config.items()
        if key not in ("proxy", "https-proxy", "noproxy") and not key.startswith("//")
    ]
    if cafile:
        lines.append(f"cafile={cafile}")
    return "\n".join(lines) + "\n"


def _host_port(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    host = parts.hostname.lower().rstrip(".")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_hosts(pip_config: dict[str, str], npm_config: dict[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    """``host:port`` of every configured index: pip's index-url (default PyPI, whose files live on
    files.pythonhosted.org), extra-index-url and find-links URLs; npm's registries (default
    registry.npmjs.org); and ``extra`` (the ``build_allow_hosts`` setting: ``host`` or ``host:port``)."""
    urls = [pip_config.get("index-url") or "https://pypi.org/simple"]
    urls += pip_config.get("extra-index-url", "").split() + pip_config.get("find-links", "").split()
    urls += [value for key, value in npm_config.items() if key == "registry" or key.endswith(":registry")]
    if "registry" not in npm_config:
        urls.append("https://registry.npmjs.org/")
    found = {hp for hp in (_host_port(url) for url in urls) if hp}
    if "pypi.org:443" in found:
        found.add("files.pythonhosted.org:443")
    for item in extra:
        item = item.strip().lower()
        if item:
            found |= {item} if re.search(r":\d+$", item) else {f"{item}:443", f"{item}:80"}
    return frozenset(found)


def registry_hosts(npm_config: dict[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    """``host:port`` of npm's configured registries (default registry.npmjs.org) and ``extra``: what an
    npm install's relay reaches (no Python index)."""
    urls = [value for key, value in npm_config.items() if key == "registry" or key.endswith(":registry")]
    if "registry" not in npm_config:
        urls.append("https://registry.npmjs.org/")
    found = {hp for hp in (_host_port(url) for url in urls) if hp}
    for item in extra:
        item = item.strip().lower()
        if item:
            found |= {item} if re.search(r":\d+$", item) else {f"{item}:443", f"{item}:80"}
    return frozenset(found)


BUILD_UID_OFFSET = 1024  # workers take sandbox_uid_base .. +1023: a build never shares a worker's uid


def build_uid(sandbox_uid_base: int) -> int:
    """The unprivileged uid package installs run as, on both backends."""
    return sandbox_uid_base + BUILD_UID_OFFSET


def direct_hosts(allow: Iterable[str]) -> tuple[str, ...]:
    """The host names of ``build_allow_hosts`` entries (``host`` or ``host:port``)."""
    return tuple(
        h.strip().lower().rsplit(":", 1)[0] if re.search(r":\d+$", h.strip()) else h.strip().lower() for h in allow
    )
