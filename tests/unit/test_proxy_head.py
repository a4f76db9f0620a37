"""evaluator_host.sandbox.egress.head: the one parser of the egress proxy's and the build relay's request heads."""

from __future__ import annotations

import pytest

from evaluator_host.sandbox.egress.head import ProxyHead, Refused, checked, parse_origin, parse_proxy_head


def test_a_connect_names_its_host_as_written_lowercased_without_the_trailing_dot() -> None:
    head = parse_proxy_head(b"CONNECT PyPI.org.:443 HTTP/1.1\r\nHost: x", "relay")
    assert head == ProxyHead(True, "pypi.org", 443)
    assert head.destination == "pypi.org:443"
    assert parse_proxy_head(b"CONNECT [::1]:443 HTTP/1.1", "relay").destination == "[::1]:443"


def test_a_plain_request_keeps_its_path_query_and_header_lines() -> None:
    head = parse_proxy_head(b"GET http://Example.com:8080/a/b?c=d HTTP/1.1\r\nAccept: x\r\nProxy-Auth: y", "proxy")
    assert (head.tunnel, head.host, head.port, head.method, head.path, head.version) == (
        False,
        "example.com",
        8080,
        "GET",
        "/a/b?c=d",
        "HTTP/1.1",
    )
    assert head.lines == ["Accept: x", "Proxy-Auth: y"]
    assert checked(head).lines == ["Accept: x"]  # the egress proxy's rule: no proxy or hop-by-hop line
    assert parse_proxy_head(b"GET http://[::1]/ HTTP/1.1", "relay").destination == "[::1]:80"


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"GET / HTTP/1.1", "only CONNECT, or a plain http:// URL, goes through this relay"),
        (b"GET https://pypi.org/ HTTP/1.1", "only CONNECT, or a plain http:// URL, goes through this relay"),
        (b"GET http://[::1/ HTTP/1.1", "only CONNECT, or a plain http:// URL, goes through this relay"),
        (b"GET http://pypi.org:99999/ HTTP/1.1", "bad port"),
        (b"CONNECT pypi.org HTTP/1.1", "CONNECT needs host:port"),
        (b"CONNECT pypi.org:443", "not an HTTP proxy request"),
        (b"CONNECT pypi.org:443 SPDY/3", "not an HTTP proxy request"),
    ],
)
def test_anything_else_is_refused_with_its_reason(head: bytes, reason: str) -> None:
    with pytest.raises(Refused, match=f"^{reason.replace('?', '[?]')}$"):
        parse_proxy_head(head, "relay")


def test_a_folded_or_malformed_header_line_is_refused_by_the_egress_rule() -> None:
    for lines in (b"\r\nA: b\r\n folded", b"\r\nno colon", b"\r\n: empty name"):
        with pytest.raises(Refused, match="a malformed header line"):
            checked(parse_proxy_head(b"GET http://a.example/ HTTP/1.1" + lines, "proxy"))


def test_a_request_inside_an_ended_tunnel_is_for_a_path_and_is_sent_on_with_the_added_headers() -> None:
    head = parse_origin(b"POST /v1?x=1 HTTP/1.1\r\nHost: evil\r\nAuthorization: mine\r\nA: b", "api.example", 443)
    sent = head.forward((("Authorization", "Bearer s"),)).decode()
    assert (
        sent
        == "POST /v1?x=1 HTTP/1.1\r\nHost: api.example\r\nA: b\r\nAuthorization: Bearer s\r\nConnection: close\r\n\r\n"
    )
    with pytest.raises(Refused, match="not an HTTP/1.x request for a path"):
        parse_origin(b"GET http://other/ HTTP/1.1", "api.example", 443)
