"""The client's address, the one thing login lockouts, rate limits and the audit log count by.

X-Forwarded-For is written by whoever sends the request: it names the client only when the peer is a proxy we
trust (PORTAL_TRUSTED_PROXIES, addresses or CIDRs; none by default). Then the client is the right-most address of
the header that is not itself a trusted proxy (what the client wrote to the left of it is skipped). Everything
else uses REMOTE_ADDR, the TCP peer: the web server never rewrites it (uvicorn runs with --no-proxy-headers, since
its default trusts X-Forwarded-For from 127.0.0.1), so this is the one place the decision is made.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str], setting: str = "PORTAL_TRUSTED_PROXIES") -> list[Network]:
    """Networks from "10.0.0.0/8", "192.0.2.7", "2001:db8::/32"; ValueError naming the setting and the value."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{setting}: {value.strip()!r} is not an IP address or CIDR") from None
    return networks


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [2001:db8::1]:443
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # 192.0.2.1:443
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address, trusted: list[Network]) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return any(address in net or (mapped is not None and mapped in net) for net in trusted)


def client_address(peer: str, forwarded_for: str, trusted: list[Network]) -> str:
    """The client's address: `peer` unless it is a trusted proxy, else the right-most untrusted address of
    `forwarded_for` (the farthest trusted one when all are; `peer` when the header holds nothing usable)."""
    peer_address = _address(peer)
    if not trusted or not forwarded_for or peer_address is None or not _trusted(peer_address, trusted):
        return peer
    hops = [_address(hop) for hop in forwarded_for.split(",")]
    if not hops or any(hop is None for hop in hops):
        return peer  # a proxy that forwards garbage is not followed into it
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return str(hop)
    return str(hops[0])


class ClientAddressMiddleware:
    """Puts the client's address in REMOTE_ADDR (the peer stays in PORTAL_PEER_ADDR), before anything reads it:
    django-axes, the rate limits (apps/accounts/throttles.py) and the audit log all count by REMOTE_ADDR."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        meta = request.META
        peer = meta.get("REMOTE_ADDR", "")
        meta["PORTAL_PEER_ADDR"] = peer
        meta["REMOTE_ADDR"] = client_address(
            peer, meta.get("HTTP_X_FORWARDED_FOR", ""), settings.PORTAL_TRUSTED_PROXIES
        )
        return self.get_response(request)
