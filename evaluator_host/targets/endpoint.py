"""Where a target's calls may go: the egress allowlist's rule, applied to a job's ``base_url``.

Contract: :func:`check_endpoint` answers the :class:`Endpoint` (scheme, name, port, and the one
address calls connect to) or ``TargetError`` (HTTP 400) naming the host. The rule is the egress
proxy's (``sandbox/egress/proxy.py``), from the service process instead of a sandbox:

* the host must be a DNS name (IP literals are refused) and ``host:port`` must be in the workspace's
  ``network_allow`` — or, on an open service (no API keys), the name one the operator pinned in
  ``EVALUATOR_HOST_EGRESS_HOSTS``;
* a pinned name connects to its pinned address (trusted as given); any other name is resolved once and
  every address must be public (:func:`~evaluator_host.sandbox.egress.addresses.is_public`: no
  loopback, private, link-local — cloud metadata —, shared or reserved address); the calls go to the
  very address checked (``Host`` and TLS's SNI name the host), so a DNS answer that changes later
  (rebinding) changes nothing. The check runs when the job is created and again each time it starts.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from evaluator_host.errors import TargetError
from evaluator_host.sandbox.egress.addresses import is_public, system_resolve

__all__ = ["Endpoint", "check_endpoint"]

_RESOLVE_TIMEOUT_S = 10.0
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Endpoint:
    """A checked ``base_url``: the URL calls go to (its host the checked address) and the names it carries."""

    base_url: str
    scheme: str
    host: str
    port: int
    address: str
    path: str

    @property
    def netloc(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def url(self, suffix: str) -> str:
        """The URL of ``suffix`` (e.g. ``/chat/completions``) on the checked address."""
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{address}:{self.port}{self.path}{suffix}"


async def check_endpoint(
    base_url: str,
    network_allow: frozenset[str] | set[str] | list[str],
    *,
    open_service: bool,
    pinned: Mapping[str, str],
    resolve: Resolver = system_resolve,
    public: Callable[[str], bool] = is_public,
) -> Endpoint:
    """The endpoint of ``base_url`` if the workspace may call it (the module's contract), else ``TargetError``."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower().rstrip(".")
    scheme = parts.scheme
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise TargetError(f"target.base_url has an invalid port: {base_url[:200]!r}") from None
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        raise TargetError(
            f"target host {host} is an IP literal: name the host (and allow host:port); a server on this machine or "
            'network gets a name from the operator: EVALUATOR_HOST_EGRESS_HOSTS=\'{"llm.local": "'
            + host.strip("[]")
            + "\"}'"
        )
    pins = {name.lower().rstrip("."): address for name, address in pinned.items()}
    destination = f"{host}:{port}"
    if destination not in network_allow and not (open_service and host in pins):
        raise TargetError(
            f"target host {destination} is not in this workspace's network_allow (the operator sets it with "
            'PATCH /v1/workspaces/{id} {"network_allow": [...]}; on a service without API keys, '
            "EVALUATOR_HOST_EGRESS_HOSTS names allowed hosts too)"
        )
    address = pins.get(host)
    if address is None:
        try:
            addresses = await asyncio.wait_for(resolve(host, port), _RESOLVE_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise TargetError(f"target host {host} does not resolve ({type(exc).__name__})") from None
        blocked = [a for a in addresses if not public(a)]
        if blocked or not addresses:
            raise TargetError(
                f"target host {host} resolves to an address that is not public ({', '.join(blocked) or 'none'}); "
                "an internal endpoint is pinned by the operator in EVALUATOR_HOST_EGRESS_HOSTS"
            )
        address = addresses[0]
    return Endpoint(base_url, scheme, host, port, address, parts.path.rstrip("/"))
