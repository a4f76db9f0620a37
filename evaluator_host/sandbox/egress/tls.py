"""TLS for the egress proxy's header injection: the certificate authority sandboxes trust, and the
contexts on both sides of a connection the proxy completes with headers (:mod:`evaluator_host.sandbox.egress.proxy`).

A destination declared with ``headers`` gets them from the proxy, so the secret they carry never enters
the sandbox. Over HTTPS the proxy must see the request to add them: it ends the sandbox's TLS itself, with
a certificate for the destination's name issued by :class:`Authority` — a CA made by this service when
its first egress worker starts, its key held in memory only — and opens its own TLS to the destination,
verifying it against the ``ca_bundle`` setting (the host's system bundle by default), as any client would.

Sandboxes trust that CA through :attr:`Authority.bundle`: the system bundle followed by the CA's
certificate, bound read-only into every egress worker and named by ``CURL_CA_BUNDLE`` and
``NODE_EXTRA_CA_CERTS`` — and by ``SSL_CERT_FILE``/``REQUESTS_CA_BUNDLE``, or, where ``openssl`` made the
hashed folder of the same certificates, ``SSL_CERT_DIR``/``REQUESTS_CA_BUNDLE`` naming it
(:func:`evaluator_host.sandbox.egress.proxy.proxy_env`). Destinations
without headers are untouched: their TLS goes end to end through a ``CONNECT`` tunnel, as before.

The same CAs are also a hashed directory (:func:`hashed_directory`, one file per certificate and OpenSSL's
``HASH.N`` names, by ``openssl rehash``), bound at ``/sandbox/egress-ca.d`` and named by ``SSL_CERT_DIR``
and ``REQUESTS_CA_BUNDLE`` instead of the file: a TLS context given a directory reads a certificate only
when a handshake looks it up, where one given the file parses all of them (~150) when it is made — ~2 ms
against 20-100 ms, and httpx (the ``openai`` SDK's client) makes one context per proxy variable for every
client it builds (``autoevals`` builds one per scorer call). Without an ``openssl`` command the file stays
what ``SSL_CERT_FILE`` names, as before.
"""

from __future__ import annotations

import datetime
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "hashed_directory", "upstream_context"]

_LEAF_DAYS = 7  # a leaf certificate's lifetime; made again after a day
_LEAF_REUSE_S = 24 * 3600.0
_ALPN = ["http/1.1"]  # the proxy reads HTTP/1.1 requests: no HTTP/2 inside


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


class Authority:
    """This service's egress CA (see the module docstring): made once, its key never written anywhere;
    leaf certificates per host name, cached."""

    def __init__(self, directory: Path, system_bundle: Path | None) -> None:
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "evaluator-host"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"evaluator-host egress CA {uuid.uuid4().hex[:8]}"),
            ]
        )
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._private = Path(tempfile.mkdtemp(prefix="keys-", dir=directory))  # 0700: leaves pass through here
        system = system_bundle.read_bytes() if system_bundle is not None and system_bundle.is_file() else b""
        if system and not system.endswith(b"\n"):
            system += b"\n"
        self.bundle = directory / "ca-bundle.pem"
        self.bundle.write_bytes(system + self.certificate.public_bytes(serialization.Encoding.PEM))
        os.chmod(self.bundle, 0o644)  # the sandbox's uid reads it (bound in read-only)
        self.hashed = hashed_directory(self.bundle, directory / "ca.d")
        self._contexts: dict[str, tuple[float, ssl.SSLContext]] = {}
        self._lock = threading.Lock()

    def server_context(self, host: str) -> ssl.SSLContext:
        """The TLS server context the proxy shows the sandbox for ``host`` (a certificate for that name)."""
        with self._lock:
            found = self._contexts.get(host)
            if found is not None and time.monotonic() - found[0] < _LEAF_REUSE_S:
                return found[1]
            context = self._issue(host)
            self._contexts[host] = (time.monotonic(), context)
            return context

    def _issue(self, host: str) -> ssl.SSLContext:
        now = datetime.datetime.now(datetime.UTC)
        public = self._leaf_key.public_key()
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=_LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(_ALPN)
        # load_cert_chain reads files only: written to the 0700 directory, loaded, removed
        path = self._private / f"{uuid.uuid4().hex}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(
                    self._leaf_key.private_bytes(
                        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                    )
                )
                fh.write(leaf.public_bytes(serialization.Encoding.PEM))
            context.load_cert_chain(path)
        finally:
            path.unlink(missing_ok=True)
        return context


def upstream_context(ca_bundle: Path | None) -> ssl.SSLContext:
    """The proxy's own TLS client context toward destinations: verified against ``ca_bundle`` (the
    system's default paths when none), HTTP/1.1."""
    context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle is not None else None)
    context.set_alpn_protocols(_ALPN)
    return context


def hashed_directory(bundle: Path, directory: Path) -> Path | None:
    """``directory`` holding each certificate of ``bundle`` in a file of its own with OpenSSL's hash names
    (``openssl rehash``), readable by the sandbox's uid; None when that cannot be made (no ``openssl``)."""
    tool = shutil.which("openssl")
    if tool is None:
        return None
    directory.mkdir(mode=0o755, exist_ok=True)
    text = bundle.read_text(encoding="ascii", errors="replace")
    end = "-----END CERTIFICATE-----"
    for number, block in enumerate(part for part in text.split(end) if "-----BEGIN CERTIFICATE-----" in part):
        pem = directory / f"ca-{number:04d}.pem"
        pem.write_text(block[block.index("-----BEGIN CERTIFICATE-----") :] + end + "\n")
        os.chmod(pem, 0o644)
    try:
        done = subprocess.run([tool, "rehash", str(directory)], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or not any(entry.name.endswith(".0") for entry in directory.iterdir()):
        return None
    os.chmod(directory, 0o755)
    return directory
