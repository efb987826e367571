"""Who may call a service through the router.

- `Authorization: Bearer <portal API token>` of a member of the service's project (any role: calling a model
  reads, so a read-scoped token is enough); a token limited to another project is refused.
- The service's key (`Authorization: Bearer psk_…` or `X-Service-Key: psk_…`) when its auth is "key".
- Nothing when its auth is "public".
- A member's browser session (the portal's session cookie), for the test console on the service page; an
  unsafe method must then come from the portal's own pages (Origin, or without one Referer, is the portal's
  origin or one of CSRF_TRUSTED_ORIGINS), else 403.

No or bad credentials answer 401 (with WWW-Authenticate); good credentials that do not reach the service
(not a member, a token of another project, no such service) answer 404, so nobody learns which services
exist. Decisions are cached in-process for `PORTAL_SERVING_ROUTER_AUTH_TTL` seconds (default 5), then
refreshed in the background (`TTLCache`): a revoked token, a removed member or a logged-out session is
refused within that time plus one database query.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from apps.accounts.models import hash_token
from apps.accounts.services import authenticate_token
from apps.projects.permissions import projects_for
from portal.lib.origins import from_portal

logger = logging.getLogger(__name__)

OK, UNAUTHORIZED, FORBIDDEN, NOT_FOUND = 0, 401, 403, 404
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
SERVICE_KEY_PREFIX = "psk_"
MAX_ENTRIES = 10_000


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run database work on Django's shared worker thread, with connections handled as a request would."""

    def run() -> Any:
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=True)()


class TTLCache:
    """Values kept `ttl` seconds, then served stale for up to another `ttl` while one background load refreshes
    them (so no request waits for the database on a busy key); a key unseen or older than that is loaded while
    its requests wait, all of them on a single load. One per event loop (it holds that loop's futures)."""

    def __init__(self, ttl: float, serve_stale: bool = True) -> None:
        self.ttl = ttl
        # Routes are not served stale: a route up to 2 × ttl old could name replicas that were drained and stopped
        # (the drain outlasts one ttl, not two), and the request would fail on them.
        self.serve_stale = serve_stale
        self._values: dict[Any, tuple[float, Any]] = {}
        self._loading: dict[Any, asyncio.Future[Any]] = {}
        self._refreshing: set[asyncio.Task[Any]] = set()
        self._generation = 0  # clear() moves it on: a load that started before must not store its value

    async def get(self, key: Any, load: Callable[[Any], Awaitable[Any]]) -> Any:
        """The value of `key`; `load(previous value or None)` makes a new one."""
        entry = self._values.get(key)
        if entry is not None:
            age = time.monotonic() - entry[0]
            if age < self.ttl:
                return entry[1]
            if self.serve_stale and age < 2 * self.ttl:
                if key not in self._loading:
                    loop = asyncio.get_running_loop()
                    task = loop.create_task(self._load(key, load, entry[1], self._claim(key)))
                    self._refreshing.add(task)
                    task.add_done_callback(self._refreshed)
                return entry[1]
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        return await self._load(key, load, entry[1] if entry is not None else None, self._claim(key))

    def _claim(self, key: Any) -> asyncio.Future[Any]:
        """Mark `key` as loading, at once (before any await), so that concurrent callers share the load."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        return future

    async def _load(
        self, key: Any, load: Callable[[Any], Awaitable[Any]], previous: Any, future: asyncio.Future[Any]
    ) -> Any:
        generation = self._generation
        try:
            value = await load(previous)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            if self._loading.get(key) is future:
                del self._loading[key]
        future.set_result(value)
        if generation == self._generation:
            self.put(key, value)
        return value

    def _refreshed(self, task: asyncio.Task[Any]) -> None:
        self._refreshing.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the stale value serves on until it is too old
            logger.warning("serving router: refresh failed: %s", task.exception())

    def put(self, key: Any, value: Any) -> None:
        if len(self._values) >= MAX_ENTRIES:  # e.g. a flood of made-up tokens: keep memory bounded
            self._values.clear()
        self._values[key] = (time.monotonic(), value)

    def clear(self) -> None:
        """Forget everything, loads under way included (their callers get their values; nobody else does)."""
        self._generation += 1
        self._values.clear()
        self._loading.clear()


def token_decision(raw: str, project_id: int | None) -> int:
    """OK if the token is active and reaches the project, NOT_FOUND if valid but not, else UNAUTHORIZED."""
    token = authenticate_token(raw)
    if token is None:
        return UNAUTHORIZED
    if project_id is None or token.project_id not in (None, project_id):
        return NOT_FOUND
    return OK if _member(token.user, project_id) else NOT_FOUND


def session_decision(session_key: str, project_id: int | None) -> int:
    """OK for a logged-in member's session, NOT_FOUND for another logged-in user, else UNAUTHORIZED."""
    from django.contrib.auth import get_user

    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    # get_user() checks the session's auth hash (a changed password ends it) and the user being active.
    user = get_user(SimpleNamespace(session=store))
    if not user.is_authenticated:
        return UNAUTHORIZED
    return OK if project_id is not None and _member(user, project_id) else NOT_FOUND


def _member(user: Any, project_id: int) -> bool:
    return projects_for(user).filter(pk=project_id).exists()


def service_key_matches(raw: str, digest: str) -> bool:
    return bool(digest) and hmac.compare_digest(hash_token(raw), digest)


class Credentials:
    """What a request presents, read once from its ASGI headers."""

    __slots__ = ("bearer", "host", "origin", "referer", "service_key", "session_key")

    def __init__(self) -> None:
        self.bearer: str | None = None
        self.service_key: str | None = None
        self.session_key: str | None = None
        self.origin: str | None = None
        self.referer: str | None = None
        self.host: str = ""

    def authorization(self, value: bytes) -> None:
        scheme, _, raw = value.decode("latin-1").strip().partition(" ")
        raw = raw.strip()
        if scheme.lower() in ("bearer", "token") and raw and " " not in raw:
            if raw.startswith(SERVICE_KEY_PREFIX):
                self.service_key = raw
            else:
                self.bearer = raw
        else:
            self.bearer = ""  # present but unusable: a 401, not a fall-through to the session

    def cookie(self, value: bytes) -> None:
        wanted = settings.SESSION_COOKIE_NAME + "="
        for part in value.decode("latin-1").split(";"):
            part = part.strip()
            if part.startswith(wanted):
                self.session_key = part[len(wanted) :] or None


class Authorizer:
    """The router's decisions for one event loop (their caches hold futures of that loop)."""

    def __init__(self, ttl: float) -> None:
        self.tokens = TTLCache(ttl)
        self.sessions = TTLCache(ttl)

    async def decide(self, route: Any, creds: Credentials, method: str, scheme: str) -> int:
        """OK, or the status to answer: UNAUTHORIZED, FORBIDDEN or NOT_FOUND."""
        project_id = route.project_id if route.exists else None
        if route.exists and route.auth == "public":
            return OK
        if creds.service_key is not None:
            ok = route.exists and route.auth == "key" and service_key_matches(creds.service_key, route.key_digest)
            return OK if ok else UNAUTHORIZED
        if creds.bearer is not None:
            if not creds.bearer:
                return UNAUTHORIZED
            key = (hash_token(creds.bearer), project_id)
            raw = creds.bearer
            return await self.tokens.get(key, lambda _: in_thread(token_decision, raw, project_id))
        if creds.session_key:
            session_key = creds.session_key
            decision = await self.sessions.get(
                (session_key, project_id), lambda _: in_thread(session_decision, session_key, project_id)
            )
            if decision == OK and method not in SAFE_METHODS and not same_origin(creds, scheme):
                return FORBIDDEN
            return decision
        return UNAUTHORIZED

    def clear(self) -> None:
        self.tokens.clear()
        self.sessions.clear()


def request_scheme(scope: dict[str, Any], headers: dict[bytes, bytes]) -> str:
    """http or https as Django would see it (SECURE_PROXY_SSL_HEADER honoured)."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header = proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        value = headers.get(header)
        if value is not None:
            return "https" if value.decode("latin-1").split(",")[0].strip() == proxy[1] else "http"
    return scope.get("scheme", "http")


def same_origin(creds: Credentials, scheme: str) -> bool:
    """Origin (or, without one, Referer) names the portal itself (portal/lib/origins.py)."""
    return bool(creds.host) and from_portal(creds.origin, creds.referer, f"{scheme}://{creds.host}")
