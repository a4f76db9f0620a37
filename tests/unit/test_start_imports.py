"""A start loads what starting needs (issue 49: every ``serve`` and CLI subprocess of the suite pays its imports).

Structural, never timed: fresh interpreters report what they imported (``sys.modules``, or ``-X importtime`` of the
real command). The app's import loads no module that only some requests or settings need — the gRPC receiver (grpc),
the SBOM writer (cyclonedx), the prompt templates (Jinja2), the ciphers (cryptography: the vault's and the egress
proxy's CA), the HTTP client of forwarding and sinks (httpx); the command line's parser loads no pydantic, rich or
HTTP client; a command that talks to a service loads no store, SQLAlchemy or cipher; the vault imports cryptography
with its first secret, not at start-up; and a handler's import runs with the garbage collector paused, which it
turns back on.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _modules_after(code: str) -> list[str]:
    done = _python("-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def _imported_by_command(*argv: str) -> list[str]:
    """Every module the real ``python -m evaluator_host.cli ARGV`` imported (``-X importtime``), whatever it exited."""
    done = _python("-X", "importtime", "-m", "evaluator_host.cli", *argv)
    names = [
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    ]
    assert len(names) > 50, done.stderr[-2000:]
    return names


def _loaded(names: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted({n for n in names if any(n == p or n.startswith(p + ".") for p in packages)})


def test_importing_the_app_loads_no_module_that_only_some_requests_or_settings_need() -> None:
    names = _modules_after("import evaluator_host.api.app")
    assert "fastapi" in names and "evaluator_host.api.routes.runtimes" in names  # the reading sees imports
    not_at_start = (
        "grpc",  # the OTLP/gRPC receiver: only with otlp_grpc_port
        "evaluator_host.api.otlp_grpc",
        "cyclonedx",  # the SBOM: GET /v1/runtimes/{id}/lock?format=cyclonedx
        "packageurl",
        "jinja2",  # a job's prompt template
        "evaluator_host.targets.prompts",
        "cryptography",  # the vault's first secret, the egress proxy's first gate
        "evaluator_host.sandbox.egress.tls",
        "alembic",  # the schema's migrations: when an engine is made
        "httpx",  # the forwarder's and the sinks' client: with their first request (httpx imports click and rich)
        "rich",
    )
    assert _loaded(names, not_at_start) == []


def test_the_command_lines_help_loads_no_pydantic_rich_or_http_client() -> None:
    names = _imported_by_command("--help")
    assert "evaluator_host.cli.main" in names
    assert _loaded(names, ("pydantic", "rich", "httpx", "evaluator_host.errors.wire")) == []


def test_a_command_that_talks_to_a_service_loads_no_store_database_or_cipher() -> None:
    """``rules list --server`` (nothing listens there: the command fails, after its imports)."""
    names = _imported_by_command("rules", "list", "--server", "http://127.0.0.1:9")
    assert "evaluator_host.client" in names and "httpx" in names  # it did reach for the client
    assert _loaded(names, ("sqlalchemy", "alembic", "evaluator_host.store", "cryptography")) == []
    assert _loaded(names, ("evaluator_host.tenancy.vault", "fastapi")) == []


_VAULT = textwrap.dedent(
    """
    import asyncio, sys, tempfile
    from pathlib import Path
    from evaluator_host.errors import SecretError
    from evaluator_host.settings import Settings
    from evaluator_host.store.db import make_engine
    from evaluator_host.store.secrets import SecretStore
    from evaluator_host.tenancy.vault import Vault

    data = Path(tempfile.mkdtemp())
    store = SecretStore(make_engine(f"sqlite:///{data / 'db.sqlite'}"))
    try:
        Vault(Settings(data_dir=data, secrets_key=["not-a-fernet-key"]), store)
        refused = ""
    except SecretError as exc:
        refused = exc.message
    vault = Vault(Settings(data_dir=data), store)
    before = "cryptography" in sys.modules
    asyncio.run(vault.put("ws_default", "API_TOKEN", "s3cret-value"))
    again = Vault(Settings(data_dir=data), store)  # a restart: the stored value is read (and rotated) at start
    value = asyncio.run(again.values("ws_default", ["API_TOKEN"]))
    print(json.dumps({"refused": refused, "before": before, "after": "cryptography" in sys.modules, "value": value}))
    """
)


def test_the_vault_imports_cryptography_with_its_first_secret_and_still_refuses_a_bad_key_at_start() -> None:
    done = _python("-c", "import json\n" + _VAULT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert "must be Fernet keys" in found["refused"]  # checked at start, without cryptography
    assert found["before"] is False and found["after"] is True
    assert found["value"] == {"API_TOKEN": "s3cret-value"}


def test_a_handlers_import_pauses_the_garbage_collector_and_turns_it_back_on() -> None:
    from evaluator_host.cli.lazy import Lazy, collector_paused

    seen: list[bool] = []
    assert gc.isenabled()
    with collector_paused():
        seen.append(gc.isenabled())
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
    assert Lazy("json", "dumps")([1]) == "[1]" and gc.isenabled()  # the handler runs with it on again
