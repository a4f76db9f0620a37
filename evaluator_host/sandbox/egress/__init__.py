"""The egress proxy: the only way out of a sandbox that declared network hosts.

Owns: the proxy and its gates (``proxy.py``: ``EgressProxy``, ``EgressGate``, ``proxy_env``), the SSRF
guard on resolved addresses (``addresses.py``), the one parser of a forward proxy's request head
(``head.py``, also used by the build relay), TLS for destinations it sets headers on (``tls.py``), the
proxy port handed over from a Python sandbox (``handoff.py``) and the byte relay (``splice.py``).

May import: ``errors``, ``settings``, ``observability`` and the sandbox contract (``sandbox.base``). Never
the pool (``pool/``) nor a backend: backends hold a gate, the proxy knows nothing of them.
"""
