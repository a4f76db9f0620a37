"""Names the package reserves, as constants alone: ``RESERVED_NAMES``, the environment variables the sandbox
sets itself (``SANDBOX_ENV``) and the egress proxy's, never a secret's name (``vault.check_name``) nor a
definition's plain variable (``evaluation/plain_env.py``); ``DEFAULT_WORKSPACE``, the workspace of everything
stored before workspaces existed and of ``EVALUATOR_HOST_API_KEYS``' keys.

Imports nothing, so that the models that check them (the API's, the CLI's, the Python client's) import neither
the vault's cryptography nor the store and SQLAlchemy; ``store.db`` and ``tenancy.models`` re-export
``DEFAULT_WORKSPACE``.
"""

from __future__ import annotations

__all__ = ["DEFAULT_WORKSPACE", "RESERVED_NAMES"]

DEFAULT_WORKSPACE = "ws_default"

RESERVED_NAMES = frozenset(
    {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}
    | {"MKL_NUM_THREADS", "OTEL_RESOURCE_ATTRIBUTES", "NODE_OPTIONS", "NODE_USE_ENV_PROXY", "NO_PROXY", "no_proxy"}
    | {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
    | {"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
)
