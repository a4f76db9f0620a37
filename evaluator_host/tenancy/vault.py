"""Workspace secrets: encrypted at rest, handed to the workers of evaluators that list them, and
redacted from everything that comes back.

Contract:

* Values are encrypted with Fernet (AES-128-CBC + HMAC-SHA256) under ``EVALUATOR_HOST_SECRETS_KEY``
  (newest key first; every listed key decrypts) or, when none is set, a key generated once in
  ``data_dir/secrets.key`` (mode 0600). At start-up every value not encrypted under the first key is
  re-encrypted under it (rotation: put the new key first, restart, then drop the old one).
* The API shows names and times only. A value reaches a worker only in the ``load`` frame of an
  evaluator that lists its name (``secrets``), as an environment variable, and never anything else.
* :class:`~evaluator_host.tenancy.redaction.Redactor` replaces every value (and its JSON-escaped form) by
  ``[secret NAME]`` in what a worker sends back — stdout, stderr, errors, the returned value — and
  in infrastructure errors about that worker, before anything is answered, logged or stored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator_host.errors import SecretError
from evaluator_host.settings import Settings
from evaluator_host.store.secrets import SecretInfo, SecretStore
from evaluator_host.tenancy.reserved import RESERVED_NAMES

if TYPE_CHECKING:  # cryptography is imported when a value is first encrypted or decrypted (Vault._fernet)
    from cryptography.fernet import Fernet, MultiFernet

__all__ = ["MAX_SECRET_BYTES", "MIN_SECRET_CHARS", "RESERVED_NAMES", "Vault", "check_name"]

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words out of every answer
MAX_SECRET_BYTES = 64 * 1024


def check_name(name: str) -> str:
    """``name`` when it is a valid secret name (an environment variable name), else ``SecretError``."""
    if not NAME.fullmatch(name):
        raise SecretError(
            f"secret name {name[:120]!r} is not an environment variable name (letters, digits, _; at most 100)"
        )
    if name in RESERVED_NAMES:
        raise SecretError(f"secret name {name!r} is reserved (the sandbox sets it)")
    return name


def _is_fernet_key(key: bytes) -> bool:
    """What ``Fernet(key)`` accepts: 32 bytes, url-safe base64-encoded."""
    try:
        return len(base64.urlsafe_b64decode(key)) == 32
    except binascii.Error:
        return False


def _keys(settings: Settings) -> list[bytes]:
    """The Fernet keys, newest first (``data_dir/secrets.key``, made when missing, if none is set);
    ``SecretError`` at once when one is not a Fernet key, checked as ``Fernet`` checks it, without importing
    cryptography (a start that stores no secret never needs it)."""
    keys = list(settings.secrets_key)
    if not keys:
        path = settings.data_dir / "secrets.key"
        if not path.exists():
            _write_new_key(path)
        keys = [path.read_text().strip()]
    encoded = [k.encode() for k in keys]
    if not all(_is_fernet_key(k) for k in encoded):
        raise SecretError(
            "EVALUATOR_HOST_SECRETS_KEY must be Fernet keys (32 url-safe base64-encoded bytes each), comma-separated"
        )
    return encoded


def _write_new_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(base64.urlsafe_b64encode(os.urandom(32)).decode() + "\n")  # as Fernet.generate_key()


class Vault:
    """The workspaces' secrets (see the module docstring); decrypted values are cached per workspace."""

    def __init__(self, settings: Settings, store: SecretStore) -> None:
        self.store = store
        self._keys = _keys(settings)
        self._ciphers: tuple[Fernet, MultiFernet] | None = None  # made on first use (:meth:`_fernet`)
        self._values: dict[str, dict[str, str]] = {}  # workspace -> name -> value (loaded on first use)
        self.generation = 0  # bumped by every change: what was bound with the old values is bound again
        self._versions = store.versions()  # what the database held when last looked (see :meth:`sync`)
        self._rotate()

    def _fernet(self) -> tuple[Fernet, MultiFernet]:
        """The first key's cipher (new values are encrypted under it) and every key's (each decrypts)."""
        if self._ciphers is None:
            from cryptography.fernet import Fernet, MultiFernet

            ciphers = [Fernet(key) for key in self._keys]
            self._ciphers = ciphers[0], MultiFernet(ciphers)
        return self._ciphers

    def _rotate(self) -> None:
        """Re-encrypt every value under the first key (a no-op when they all are)."""
        tokens = self.store.ciphertexts()
        if not tokens:
            return
        from cryptography.fernet import InvalidToken

        current, cipher = self._fernet()
        changed: dict[tuple[str, str], str] = {}
        for where, token in tokens.items():
            try:
                current.decrypt(token.encode())
            except InvalidToken:
                try:
                    changed[where] = cipher.rotate(token.encode()).decode()
                except InvalidToken as exc:
                    raise SecretError(
                        f"secret {where[1]!r} of workspace {where[0]!r} cannot be decrypted with any key of "
                        "EVALUATOR_HOST_SECRETS_KEY: every service and worker host sharing the database needs "
                        "the same key(s) (or was a key dropped before the values were rotated?)"
                    ) from exc
        if changed:
            self.store.replace_ciphertexts(changed)

    async def put(self, workspace_id: str, name: str, value: str) -> bool:
        """Store a secret; True when it is new."""
        check_name(name)
        if len(value) < MIN_SECRET_CHARS or len(value.encode()) > MAX_SECRET_BYTES:
            raise SecretError(
                f"a secret's value is {MIN_SECRET_CHARS} characters to {MAX_SECRET_BYTES // 1024} KiB "
                "(shorter values cannot be redacted from answers without mangling them)"
            )
        token = self._fernet()[1].encrypt(value.encode()).decode()
        created = await asyncio.to_thread(self.store.put, workspace_id, name, token)
        self._values.pop(workspace_id, None)
        self.generation += 1
        return created

    async def delete(self, workspace_id: str, name: str) -> bool:
        """Remove a secret; False when there was none."""
        gone = await asyncio.to_thread(self.store.delete, workspace_id, name)
        self._values.pop(workspace_id, None)
        self.generation += 1
        return gone

    async def sync(self) -> None:
        """Catch up with secrets another service sharing the database put or deleted: the values of
        the workspaces whose secrets changed are read again, and what was bound with them is bound again."""
        versions = await asyncio.to_thread(self.store.versions)
        changed = {ws for ws in versions.keys() | self._versions.keys() if versions.get(ws) != self._versions.get(ws)}
        self._versions = versions
        if changed:
            for workspace_id in changed:
                self._values.pop(workspace_id, None)
            self.generation += 1

    async def names(self, workspace_id: str) -> list[SecretInfo]:
        """The workspace's secrets (names and times)."""
        return await asyncio.to_thread(self.store.names, workspace_id)

    def _decrypt(self, name: str, token: str) -> str:
        """A stored value; ``SecretError`` when no key of this process decrypts it: another service
        or worker host sharing the database stored it under a ``SECRETS_KEY`` this one lacks."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet()[1].decrypt(token.encode()).decode()
        except InvalidToken:
            raise SecretError(
                f"secret {name!r} cannot be decrypted here: it was stored under another secrets key (every "
                "service and worker host sharing the database needs the same EVALUATOR_HOST_SECRETS_KEY)"
            ) from None

    async def values(
        self, workspace_id: str, names: Iterable[str], wanted_by: str = "the evaluator lists"
    ) -> dict[str, str]:
        """The values of ``names`` in ``workspace_id``; ``SecretError`` naming any that is not set (and
        ``wanted_by``: who names them), or that this process cannot decrypt (a ``SECRETS_KEY`` differing
        from the one that stored it)."""
        wanted = list(names)
        if not wanted:
            return {}
        found = self._values.get(workspace_id)
        if found is None:
            tokens = await asyncio.to_thread(self.store.ciphertexts, workspace_id)
            found = {name: self._decrypt(name, token) for (_ws, name), token in tokens.items()}
            self._values[workspace_id] = found
        missing = [n for n in wanted if n not in found]
        if missing:
            raise SecretError(
                f"{wanted_by} secret(s) this workspace does not have: {', '.join(missing)} "
                "(set them with PUT /v1/secrets/{name})"
            )
        return {n: found[n] for n in wanted}
