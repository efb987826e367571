"""Relaying an HTTP request to a server behind the portal's login, and its answer back, streamed both ways.

The notebook proxy (apps/notebooks/proxy.py, docs/notebooks-proxy.md) and the Spark UI proxy (apps/jobs/sparkui.py,
docs/spark.md) decide who may reach which server; this module carries the request there and the answer back:
what goes up (the browser's headers less hop-by-hop ones and the portal's credentials and cookies, plus the
server's own token if it has one), what comes back (less CORS grants and portal cookies, the token blanked out
of every body and header), one pooled `httpx.AsyncClient` per event loop, bodies streamed with flat memory.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Iterable
from http.cookies import Morsel
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from portal.lib.origins import from_portal

logger = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# RFC 9110 §7.6.1, plus headers that describe one connection, not the message.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer"}
    | {"transfer-encoding", "upgrade", "expect"}
)
# Never sent up: the portal's credentials (Authorization, its CSRF header), headers httpx sets itself (Host,
# Content-Length), Origin (checked here; Jupyter would compare it with its own host and refuse), and
# Accept-Encoding (asked as identity, so the token can be found and blanked in every body).
REQUEST_DROP = HOP_BY_HOP | {"host", "authorization", "x-csrftoken", "origin", "accept-encoding", "cookie"}
# Never sent down: CORS grants (the portal grants no cross-origin reads of a notebook; Jupyter reflects any
# Origin for token-authenticated requests) and what Django sets per response.
RESPONSE_DROP = HOP_BY_HOP | {"date", "server"}
BODY_CHUNK = 256 * 1024
TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=300.0, pool=30.0)
LIMITS = httpx.Limits(max_connections=500, max_keepalive_connections=100, keepalive_expiry=60.0)

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def upstream_client() -> httpx.AsyncClient:
    """The process's pooled client (one per event loop: a pooled connection belongs to the loop that opened it;
    a server process has one, tests start several)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        # trust_env off: the servers are reached directly, never through an HTTP(S)_PROXY of the environment.
        client = httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS, follow_redirects=False, trust_env=False)
        _clients[loop] = client
    return client


def portal_cookie_names() -> frozenset[str]:
    """Cookies of the portal itself: never forwarded to a proxied server, never set by one."""
    return frozenset(
        {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, settings.LANGUAGE_COOKIE_NAME, "messages"}
    )


def same_origin(request: HttpRequest) -> bool:
    """An unsafe request came from the portal's pages (portal/lib/origins.py)."""
    own = f"{request.scheme}://{request.get_host()}"
    return from_portal(request.headers.get("Origin"), request.headers.get("Referer"), own)


def forwarded_headers(
    request: HttpRequest, token: str, extra: Iterable[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """The browser's headers as they arrived (raw ASGI list: repeated headers kept), less the dropped ones and
    the portal's cookies, plus the server's token and the caller's `extra` headers."""
    raw: list[tuple[bytes, bytes]] = list(request.scope.get("headers", []))
    connection_named = {
        name.strip().lower()
        for key, value in raw
        if key == b"connection"
        for name in value.decode("latin-1").split(",")
    }
    drop = REQUEST_DROP | connection_named
    headers = [(key, value) for key, value in raw if key.decode("latin-1").lower() not in drop]
    cookies = "; ".join(kept_cookies(value.decode("latin-1") for key, value in raw if key == b"cookie"))
    if cookies:
        headers.append((b"cookie", cookies.encode("latin-1")))
    headers.append((b"accept-encoding", b"identity"))
    if token:
        headers.append((b"authorization", f"token {token}".encode("latin-1")))
    headers.extend(extra)
    return headers


def kept_cookies(cookie_headers: Iterable[str]) -> list[str]:
    """The `name=value` pairs of Cookie headers, except the portal's own (Jupyter sets and reads `_xsrf`...)."""
    portal = portal_cookie_names()
    pairs = (pair.strip() for header in cookie_headers for pair in header.split(";"))
    return [pair for pair in pairs if pair and pair.split("=", 1)[0].strip() not in portal]


async def request_body(request: HttpRequest) -> bytes | AsyncIterator[bytes]:
    """The body Django received (spooled): bytes when small, else a stream of chunks read as they are sent."""
    first = request.read(BODY_CHUNK)
    if len(first) < BODY_CHUNK:
        return first

    async def chunks() -> AsyncIterator[bytes]:
        yield first
        while chunk := request.read(BODY_CHUNK):
            yield chunk

    return chunks()


class TokenScrubber:
    """Blanks the server's token out of a body streamed in chunks, keeping every byte count unchanged (so a
    Content-Length stays true and nothing has to be buffered whole).

    JupyterLab's page config carries `"token": "<t>"`: it becomes `"token": ""` padded with spaces, which the
    page reads as "no token" (it then sends none; the proxy adds the real one). Any other occurrence becomes
    asterisks. The end of a chunk that could begin either form waits for the next chunk, so a token split
    across chunks is still found; nothing else is held back.
    """

    def __init__(self, token: str) -> None:
        self.token = token.encode()
        self.stars = b"*" * len(self.token)
        self.key = b'"token": "'
        self.quoted = self.key + self.token + b'"'
        self.blank = b'"token": ""' + b" " * len(self.token)
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self.pending + chunk
        if self.quoted in data:
            data = data.replace(self.quoted, self.blank)
        # A token that ends the data right after the key may still be closed by the next chunk's quote: it is held
        # (as the beginning of the quoted form) and blanked then; every other token is starred now.
        open_at_end = data.endswith(self.key + self.token)
        cut = len(data) - len(self.token) if open_at_end else len(data)
        data = data[:cut].replace(self.token, self.stars) + data[cut:]
        hold = self._partial_suffix(data)
        self.pending = data[len(data) - hold :]
        return data[: len(data) - hold]

    def flush(self) -> bytes:
        data, self.pending = self.pending.replace(self.token, self.stars), b""
        return data

    def _partial_suffix(self, data: bytes) -> int:
        """The length of the longest end of `data` that is an unfinished beginning of either form (usually 0)."""
        for size in range(min(len(self.quoted) - 1, len(data)), 0, -1):
            tail = data[-size:]
            if self.quoted.startswith(tail) or (size < len(self.token) and self.token.startswith(tail)):
                return size
        return 0


class RawSetCookie(Morsel):
    """An upstream Set-Cookie header passed on byte for byte: Django sends `response.cookies` values through
    `.output()`, and parsing Jupyter's cookies into a SimpleCookie would re-quote or drop parts of them."""

    def __init__(self, raw: str) -> None:
        super().__init__()
        self.raw = raw

    def output(self, attrs: Any = None, header: str = "Set-Cookie:") -> str:
        return f"{header} {self.raw}"


def copy_headers(upstream: httpx.Response, response: HttpResponseBase, token: str, base: str = "") -> None:
    """Upstream response headers onto `response`: repeated ones joined (Set-Cookie kept one per cookie). A
    redirect to the server's own absolute URL becomes a path under `base` (local_location)."""
    connection_named = {name.strip().lower() for name in upstream.headers.get("connection", "").split(",")}
    drop = RESPONSE_DROP | connection_named
    portal = portal_cookie_names()
    del response["Content-Type"]  # Django's default: the upstream's own (or none) replaces it
    joined: dict[str, list[str]] = {}
    for index, (key, value) in enumerate(upstream.headers.multi_items()):
        if key in drop or key.startswith("access-control-"):
            continue
        value = value.replace(token, "") if token else value
        if key == "set-cookie":
            name = value.split("=", 1)[0].strip()
            if name not in portal and value.isascii():
                dict.__setitem__(response.cookies, f"{name}\0{index}", RawSetCookie(value))
            continue
        if key == "location":
            value = local_location(value, upstream.request.url, base)
        joined.setdefault(key, []).append(value)
    for key, values in joined.items():
        response[key] = ", ".join(values)


def local_location(location: str, upstream_url: httpx.URL, base: str = "") -> str:
    """A redirect to the server's own absolute URL becomes a path on the portal, under `base` when the server's
    paths are not already the proxy's (Spark's UI redirects `/` to `http://host:port/jobs/`); relative ones are kept."""
    parts = urlsplit(location)
    if parts.scheme in ("http", "https") and parts.netloc == upstream_url.netloc.decode("ascii"):
        path = parts.path if not base or parts.path.startswith(base + "/") else base.rstrip("/") + parts.path
        return path + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
    return location


async def relay(upstream: httpx.Response, scrubber: TokenScrubber | None, label: str = "proxy") -> AsyncIterator[bytes]:
    """The upstream body as it arrives. Closing the generator (the browser went away) closes the upstream."""
    try:
        async for chunk in upstream.aiter_raw():
            out = scrubber.feed(chunk) if scrubber else chunk
            if out:
                yield out
        if scrubber and (rest := scrubber.flush()):
            yield rest
    except httpx.HTTPError as exc:  # broken off mid-body: the browser sees a cut response, the log says why
        logger.warning("%s: %s %s broke off: %r", label, upstream.request.method, upstream.request.url.path, exc)
    finally:
        await upstream.aclose()


async def forward(
    request: HttpRequest,
    url: str,
    *,
    label: str,
    token: str = "",
    base: str = "",
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> StreamingHttpResponse:
    """Send `request` to `url` (the server's own URL of it) and stream the answer back. httpx.HTTPError when the
    server cannot be reached: the caller answers with a page of its own. `label` names the proxy in the log."""
    client = upstream_client()
    outgoing = client.build_request(
        request.method or "GET",
        url,
        headers=forwarded_headers(request, token, extra_headers),
        content=await request_body(request),
    )
    try:
        upstream = await client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        logger.warning("%s: %s %s failed: %r", label, request.method, outgoing.url.path, exc)
        raise
    if upstream.status_code >= 500:  # the server's own failure: say so once, as a warning, not as a portal error
        logger.warning("%s: %s %s answered %s", label, request.method, outgoing.url.path, upstream.status_code)
    response = StreamingHttpResponse(
        relay(upstream, TokenScrubber(token) if token else None, label), status=upstream.status_code
    )
    copy_headers(upstream, response, token, base)
    # The servers run their own inline scripts (JupyterLab, user outputs, Spark's UI): the portal's
    # Content-Security-Policy would break them. The server's own policy comes through instead, and framing stays
    # same-origin only (JupyterLab frames its own documents).
    response._csp_exempt = True  # type: ignore[attr-defined]  # django-csp 4's marker (its decorator is sync-only)
    response._csp_exempt_ro = True  # type: ignore[attr-defined]
    # Django logs every 4xx/5xx as the portal's; JupyterLab probes optional files with 404s all day long.
    response._has_been_logged = True  # type: ignore[attr-defined]
    if "X-Frame-Options" not in response:
        response["X-Frame-Options"] = "SAMEORIGIN"
    return response
