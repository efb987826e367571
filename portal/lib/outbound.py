"""Requests the portal sends to addresses its users typed (alert webhooks, a knowledge base's LLM endpoint): never
to this machine or to a private network unless the operator lists the network in `OUTBOUND_ALLOWED_NETWORKS`
(e.g. `10.20.0.0/16` for an in-house chat server or LLM; `0.0.0.0/0,::/0` allows every address). Without the check
any project member could make the portal POST to Label Studio, Redis, the portal's own loopback services or a cloud
metadata endpoint and read the answer back (from a delivery's error, or as the chat's answer).

When the URL is saved, an address written as numbers or `localhost` is a field error (no name lookup there: on a
machine without a resolver each one takes seconds); right before each request the host's name is resolved and
every address it has is checked; redirects are never followed. What remains is a name whose answer changes between the
check and the connection (DNS rebinding) within one request: deployments that fear it put the worker behind an
egress proxy."""

from __future__ import annotations

import ipaddress
import socket
from functools import cache
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext as _

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _networks(listed: tuple[str, ...]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(n.strip(), strict=False) for n in listed if n.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"OUTBOUND_ALLOWED_NETWORKS: {exc}") from None


def allowed_networks() -> tuple[Network, ...]:
    return _networks(tuple(settings.OUTBOUND_ALLOWED_NETWORKS))


def private_address(url: str, *, resolve: bool = True) -> str | None:
    """The first address the URL's host resolves to that is neither public (it is loopback, private, link-local,
    shared, reserved or multicast) nor in `OUTBOUND_ALLOWED_NETWORKS`, or None. A host that does not resolve is
    None: the request then fails on its own with the resolver's error. `resolve=False` looks only at a host written
    as an address (or `localhost`)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    if not resolve:
        if (host == "localhost" or host.endswith(".localhost")) and not _allowed(ipaddress.ip_address("127.0.0.1")):
            return host
        try:
            return _private(ipaddress.ip_address(host.split("%", 1)[0]))
        except ValueError:
            return None
    try:
        infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    for info in infos:
        if found := _private(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])):
            return found
    return None


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if (address.is_global and not address.is_multicast) or _allowed(address):
        return None
    return str(address)


def _allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(address.version == n.version and address in n for n in allowed_networks())


def refusal(found: str) -> str:
    """What a refused address is told (a field error, a failed delivery, a chat error)."""
    return _(
        "Refused: %(address)s is on the portal's machine or a private network (the operator may allow a network "
        "with OUTBOUND_ALLOWED_NETWORKS)."
    ) % {"address": found}
