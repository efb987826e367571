"""The router's ASGI side: `ServingRoute` sends `/serving/…` here and everything else to Django.

    GET  /serving/<project>/<service>/          the service: status, revisions taking traffic (JSON)
    ANY  /serving/<project>/<service>/v2/…      forwarded as /v2/… to a ready replica (Open Inference Protocol v2)
    ANY  /serving/<project>/<service>/v1/…      forwarded as /v1/… (an `llm` replica's OpenAI-compatible API:
                                                /v1/chat/completions, /v1/models)

No Django middleware or view runs per request: the path is split by hand, credentials and the routing table
come from in-process caches (auth.py, table.py), and the request goes up on a pooled keep-alive connection
(upstream.py). The request body is read whole (bounded by PORTAL_SERVING_ROUTER_MAX_BODY_MB) because a retry
and a shadow copy need it again; the answer streams back as the replica sends it, status, headers and body
unchanged (a model server's 400 or 404 with its reason included), plus `X-Portal-Revision: <number>`; a
server-sent event stream (`stream: true` chat completions) is relayed piece by piece as the replica writes it.

A replica that refuses the connection (or closes it before answering) is skipped and the request sent to
another once: the least busy other replica of the same revision, else of the other revision taking traffic.
Shadow copies (POST only) go out after the client's answer is sent, in background tasks, at most
PORTAL_SERVING_ROUTER_SHADOW_MAX_INFLIGHT at a time (copies beyond are dropped and counted); their answers
are counted for the shadow revision and thrown away.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from typing import Any
from urllib.parse import quote

import orjson
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.translation import gettext as _

from apps.serving import payloads, stats
from apps.serving.router import auth
from apps.serving.router.table import RevisionRoute, ServiceRoute, build, load
from apps.serving.router.upstream import Pool, Response, UpstreamError, UpstreamTimeout

logger = logging.getLogger(__name__)

PREFIX = "/serving/"
PREFIX_BYTES = PREFIX.encode()
NOT_IN_TARGET = re.compile(rb"[\x00-\x20\x7f]")  # controls and spaces would break the request line
JSON = b"application/json"
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te"}
    | {b"trailer", b"transfer-encoding", b"upgrade", b"expect"}
)
# Never sent to a replica: the caller's credentials, and what the router sets itself.
REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"authorization", b"cookie", b"x-service-key"}
REQUEST_DROP |= {b"x-csrftoken"}
# What the web app sends on its pages (SecurityMiddleware, XFrameOptionsMiddleware), for the router's answers too:
# they come from the portal's origin, so a replica's answer (a custom server may send HTML) must not be able to run
# as the portal's page. Strict-Transport-Security is per host: the web app's pages already send it for this host.
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'; sandbox"),
)
RESPONSE_DROP = HOP_BY_HOP | {b"date", b"server", b"x-portal-revision", b"referrer-policy"}
RESPONSE_DROP |= {name for name, _value in SECURITY_HEADERS}
WWW_AUTHENTICATE = (b"www-authenticate", b'Bearer realm="serving"')


class RouterState:
    """What the router keeps per event loop: routes, auth decisions, shadow tasks, and its settings (read once:
    `settings.X` costs a lookup through LazySettings on every request)."""

    def __init__(self) -> None:
        self.timeout = settings.PORTAL_SERVING_ROUTER_TIMEOUT
        self.connect_timeout = settings.PORTAL_SERVING_ROUTER_CONNECT_TIMEOUT
        self.retry_after = settings.PORTAL_SERVING_ROUTER_RETRY_AFTER
        self.keepalive = settings.PORTAL_SERVING_ROUTER_KEEPALIVE_S
        self.max_body = settings.PORTAL_SERVING_ROUTER_MAX_BODY_MB << 20
        self.max_shadows = settings.PORTAL_SERVING_ROUTER_SHADOW_MAX_INFLIGHT
        self.routes = auth.TTLCache(settings.PORTAL_SERVING_ROUTER_TABLE_TTL, serve_stale=False)
        self.authorizer = auth.Authorizer(settings.PORTAL_SERVING_ROUTER_AUTH_TTL)
        self.shadows: set[asyncio.Task[None]] = set()
        self.hosts: dict[str, bool] = {}

    async def route(self, project: str, name: str) -> ServiceRoute:
        async def load_route(previous: ServiceRoute | None) -> ServiceRoute:
            return build(project, name, await auth.in_thread(load, project, name), previous)

        return await self.routes.get((project, name), load_route)

    def clear(self) -> None:
        self.routes.clear()
        self.authorizer.clear()
        self.hosts.clear()

    def host_allowed(self, host: str) -> bool:
        """The Host header passes ALLOWED_HOSTS, as Django would require (cached: a handful of names)."""
        allowed = self.hosts.get(host)
        if allowed is None:
            patterns = settings.ALLOWED_HOSTS
            if settings.DEBUG and not patterns:
                patterns = [".localhost", "127.0.0.1", "[::1]"]
            domain, _port = split_domain_port(host)
            allowed = bool(domain) and validate_host(domain, patterns)
            if len(self.hosts) < 64:
                self.hosts[host] = allowed
        return allowed


_states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RouterState] = weakref.WeakKeyDictionary()


def state() -> RouterState:
    loop = asyncio.get_running_loop()
    found = _states.get(loop)
    if found is None:
        found = _states[loop] = RouterState()
    return found


def invalidate() -> None:
    """Forget every cached route and auth decision (all event loops of this process): the next request of each
    service reloads it."""
    for router_state in list(_states.values()):
        router_state.clear()


async def respond(send: Any, status: int, document: dict[str, Any], *extra: tuple[bytes, bytes]) -> None:
    body = orjson.dumps(document)
    headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class QuietInference(logging.Filter):
    """Drops uvicorn's access-log line of a request under /serving/ answered below 400 (errors keep theirs).

    The line cost about a quarter of the router's CPU per request (a LogRecord formatted and written, with a
    flush, for each one); the router counts every answer itself (apps/serving/stats.py) and the model server
    logs none. On the logger, so the record is dropped before any handler formats it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:  # uvicorn's (client, method, path, version, status)
            path, status = args[2], args[4]
            if isinstance(path, str) and path.startswith(PREFIX) and isinstance(status, int) and status < 400:
                return False
        return True


def quiet_access_log() -> None:
    """Install `QuietInference` on uvicorn's access logger once (unless PORTAL_SERVING_ROUTER_ACCESS_LOG)."""
    access = logging.getLogger("uvicorn.access")
    if not settings.PORTAL_SERVING_ROUTER_ACCESS_LOG and not any(isinstance(f, QuietInference) for f in access.filters):
        access.addFilter(QuietInference())


class ServingRoute:
    """ASGI middleware: HTTP requests under /serving/ go to the router, everything else to `app`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        quiet_access_log()
        proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        self.proxy_header = proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode() if proxy else None
        self.proxy_value = proxy[1] if proxy else None
        policy = settings.SECURE_REFERRER_POLICY or ""
        policy = policy if isinstance(policy, str) else ",".join(policy)
        self.security_headers = (*SECURITY_HEADERS, *([(b"referrer-policy", policy.encode())] if policy else []))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            if path.startswith(PREFIX):
                await self.handle(path, scope, receive, self.secured(send))
                return
        await self.app(scope, receive, send)

    def secured(self, send: Any) -> Any:
        """`send` with the security headers added to the answer's head (the router's own answers and relayed ones;
        a replica's values for them were dropped in `relay`)."""
        headers = self.security_headers

        async def send_secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *headers]}
            await send(message)

        return send_secured

    async def handle(self, path: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
        parts = path[len(PREFIX) :].split("/", 2)
        if len(parts) < 2 or not parts[0] or not parts[1]:
            await respond(send, 404, {"error": _("Not found: use /serving/<project>/<service>/.")})
            return
        project, name = parts[0], parts[1]
        tail = "/" + parts[2] if len(parts) == 3 else ""
        method: str = scope["method"]
        creds = auth.Credentials()
        forward: list[tuple[bytes, bytes]] = []
        scheme = scope.get("scheme", "http")
        length = 0
        for header, value in scope["headers"]:
            if header == b"authorization":
                creds.authorization(value)
            elif header == b"x-service-key":
                creds.service_key = value.decode("latin-1").strip()
            elif header == b"cookie":
                creds.cookie(value)
            elif header == b"host":
                creds.host = value.decode("latin-1")
            elif header == b"content-length":
                length = int(value) if value.isdigit() else 0
            elif header not in REQUEST_DROP:
                if header == b"origin":
                    creds.origin = value.decode("latin-1")
                elif header == b"referer":
                    creds.referer = value.decode("latin-1")
                elif header == self.proxy_header:
                    scheme = "https" if value.decode("latin-1").split(",")[0].strip() == self.proxy_value else "http"
                forward.append((header, value))

        router = state()
        if not router.host_allowed(creds.host):
            await respond(send, 400, {"error": _("Invalid Host header.")})
            return
        stats.ensure_flusher()
        try:
            route = await router.route(project, name)
            decision = await router.authorizer.decide(route, creds, method, scheme)
        except Exception:
            logger.exception("serving router: cannot look up %s/%s", project, name)
            await respond(send, 503, {"error": _("The portal cannot check this request now; try again.")})
            return
        if decision == auth.UNAUTHORIZED:
            message = _("Authentication required: a portal API token of a project member, or the service key.")
            await respond(send, 401, {"error": message}, WWW_AUTHENTICATE)
            return
        if decision == auth.FORBIDDEN:
            await respond(send, 403, {"error": _("Cross-origin request refused.")})
            return
        if decision != auth.OK or not route.exists:
            await respond(send, 404, {"error": _("No such service.")})
            return

        if tail in ("", "/"):
            await self.describe(route, method, send)
            return
        if not (tail == "/v2" or tail.startswith(("/v2/", "/v1/"))):
            await respond(send, 404, {"error": _("No such endpoint: %(path)s") % {"path": tail}})
            return
        limit = router.max_body
        if length > limit:
            await respond(send, 413, {"error": _("The body is larger than %(n)d bytes.") % {"n": limit}})
            return
        try:
            body = await read_body(receive, limit)
        except ClientGone:
            return
        if body is None:
            await respond(send, 413, {"error": _("The body is larger than %(n)d bytes.") % {"n": limit}})
            return
        target = upstream_target(scope, tail)
        if target is None:
            await respond(send, 400, {"error": _("Invalid characters in the path.")})
            return
        # An explanation (…/explain) is not an inference: it is neither logged nor copied to the shadow.
        inference = method == "POST" and not tail.endswith("/explain")
        revision = route.choose()
        if revision is None:
            stats.UNAVAILABLE.labels(project, name).inc()
            reason = route.reason or _("no replica is ready")
            await respond(
                send,
                503,
                {
                    "error": _("Service unavailable (%(status)s): %(reason)s")
                    % {"status": route.status, "reason": reason}
                },
            )
        else:
            sample = None
            if inference and route.sample():  # payload logging: the bytes held anyway, stored by the flusher
                sample = payloads.Sample(
                    route.id, revision.id, route.project_slug, payloads.new_request_id(), tail, forward, body,
                    route.log_cap, route.log_keep, time.time(),
                )  # fmt: skip
            await self.forward(router, route, revision, method, target, forward, body, send, sample)
        if inference:
            shadow = route.mirror()
            if shadow is not None:
                self.mirror(router, route, shadow, target, forward, body)

    async def describe(self, route: ServiceRoute, method: str, send: Any) -> None:
        if method not in ("GET", "HEAD"):
            await respond(send, 405, {"error": _("%(method)s is not allowed here (use GET).") % {"method": method}})
            return
        base = f"{PREFIX}{route.project_slug}/{route.name}/"
        await respond(
            send,
            200,
            {
                "project": route.project_slug,
                "service": route.name,
                "status": route.status,
                "reason": route.reason,
                "auth": route.auth,
                "url": base,
                "inference": f"{base}v2/models/<model>/infer",
                "explanation": f"{base}v2/models/<model>/explain",
                "revisions": [
                    {"number": rev.number, "role": role, "traffic_percent": share, "ready_replicas": len(rev.replicas)}
                    for role, rev, share in route.revisions()
                ],
            },
        )

    async def forward(
        self,
        router: RouterState,
        route: ServiceRoute,
        revision: RevisionRoute,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Any,
        sample: payloads.Sample | None = None,
    ) -> None:
        timeout = router.timeout
        replica = revision.pick()
        failed: list[str] = []
        for attempt in (0, 1):
            if replica is None:
                break
            meter = revision.meter
            started = meter.begin()
            replica.outstanding += 1
            try:
                response = await pool_of(router, replica).request(method, target, headers, body, timeout)
            except UpstreamError as exc:
                replica.outstanding -= 1
                failed.append(f"r{revision.number} replica {replica.index}: {exc}")
                if exc.refused:  # down: leave it alone for a while (unless nothing else is left)
                    replica.refused_until = time.monotonic() + router.retry_after
                if not exc.retryable or attempt == 1:
                    meter.end(started, 0)
                    status = 504 if isinstance(exc, UpstreamTimeout) else 502
                    await respond(send, status, {"error": "; ".join(failed)}, revision_header(revision))
                    return
                meter.abandon(started)  # not an answer: the retry counts instead
                nxt = revision.pick(exclude=replica)
                if nxt is None and (other := route.other(revision)) is not None:
                    revision, nxt = other, other.pick()
                if nxt is None and not exc.refused:  # a kept-alive connection closed under us: a fresh one will do
                    nxt = replica
                replica = nxt
                continue
            status = 0
            try:
                status = await relay(response, revision, send, sample)
            finally:
                replica.outstanding -= 1
                meter.end(started, status)
                if sample is not None and status:
                    sample.revision_id, sample.status = revision.id, status
                    payloads.record(sample)
            return
        detail = "; ".join(failed) or _("no replica is ready")
        await respond(send, 502, {"error": detail}, revision_header(revision))

    def mirror(
        self,
        router: RouterState,
        route: ServiceRoute,
        shadow: RevisionRoute,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        if len(router.shadows) >= router.max_shadows:
            stats.SHADOW_DROPPED.labels(route.project_slug, route.name).inc()
            return
        task = asyncio.get_running_loop().create_task(shadow_copy(router, shadow, target, headers, body))
        router.shadows.add(task)
        task.add_done_callback(router.shadows.discard)


def upstream_target(scope: dict[str, Any], tail: str) -> bytes | None:
    """The request target for the replica: the path after /serving/<p>/<s> as the client sent it (percent-
    encoding kept, so an encoded "/" stays one), with the query; None if it holds what no request line may."""
    raw: bytes = scope.get("raw_path") or b""
    pieces = raw.split(b"/", 4) if raw.startswith(PREFIX_BYTES) else []
    target = b"/" + pieces[4] if len(pieces) == 5 else quote(tail, safe="/:@!$&'()*+,;=-._~").encode()
    query = scope.get("query_string", b"")
    if query:
        target += b"?" + query
    return None if NOT_IN_TARGET.search(target) else target


def revision_header(revision: RevisionRoute) -> tuple[bytes, bytes]:
    return (b"x-portal-revision", str(revision.number).encode())


def pool_of(router: RouterState, replica: Any) -> Pool:
    pool = replica.pool
    if pool is None:
        pool = replica.pool = Pool(
            replica.host, replica.port, keepalive=router.keepalive, connect_timeout=router.connect_timeout
        )
    return pool


class ClientGone(Exception):
    """The client disconnected before its request body arrived whole."""


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The whole request body (None past `limit` bytes)."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body = message.get("body", b"")
    if not message.get("more_body"):
        return body if len(body) <= limit else None
    chunks, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def relay(response: Response, revision: RevisionRoute, send: Any, sample: payloads.Sample | None = None) -> int:
    """Send the replica's answer on; returns its status (0 if the body broke off midway). A logged request's answer
    carries its `X-Portal-Request-Id`, and its body (up to the cap) goes into the sample."""
    headers = [(k, v) for k, v in response.headers if k not in RESPONSE_DROP]
    headers.append(revision_header(revision))
    if sample is not None:
        headers.append((b"x-portal-request-id", sample.request_id.encode()))
    body = response.take_body()
    if body is not None:  # the usual case: the whole answer arrived with its head
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        if sample is not None:
            sample.response, sample.response_size = body, len(body)
        return response.status
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    kept: list[bytes] = []
    try:
        async for chunk in response.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if sample is not None:
                sample.response_size += len(chunk)
                if sample.response_size <= sample.cap:
                    kept.append(chunk)
    except UpstreamError as exc:
        logger.warning("serving router: r%s answer broke off: %s", revision.number, exc)
        raise  # the server closes the connection: the client sees a truncated answer, not a complete one
    await send({"type": "http.response.body", "body": b""})
    if sample is not None and sample.response_size <= sample.cap:
        sample.response = b"".join(kept)
    return response.status


async def shadow_copy(
    router: RouterState, shadow: RevisionRoute, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    replica = shadow.pick()
    if replica is None:
        return
    meter = shadow.meter
    started = meter.begin()
    replica.outstanding += 1
    status = 0
    try:
        response = await pool_of(router, replica).request("POST", target, headers, body, router.timeout)
        await response.read()
        status = response.status
    except UpstreamError as exc:
        if exc.refused:
            replica.refused_until = time.monotonic() + router.retry_after
    except Exception:  # a copy must never take anything down with it
        logger.exception("serving router: shadow copy to r%s failed", shadow.number)
    finally:
        replica.outstanding -= 1
        meter.end(started, status, mirrored=True)
