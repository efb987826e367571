"""API tokens on websockets: `Authorization: Bearer <token>` in the handshake, as on the HTTP API.

A terminal client (the `portal` command, `websockets`, `wscat -H`) sends the header; a browser cannot set headers on
a websocket and keeps using its session cookie. The header is the standard place (RFC 6750) and the one the API
already reads; tokens in the URL would land in access logs, and a token smuggled in `Sec-WebSocket-Protocol` is a
browser workaround this portal does not need. Applied per route (only consumers that narrow what they show by the
token's project, as `RunLogConsumer` does, may let tokens in): a project-scoped token must not see the rest.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from apps.accounts.services import authenticate_token

KEYWORDS = (b"bearer", b"token")


def raw_token(scope: dict[str, Any]) -> str | None:
    """The token of the handshake's Authorization header; "" for a malformed one, None for none."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            parts = value.split()
            if not parts or parts[0].lower() not in KEYWORDS:
                return None
            return parts[1].decode("latin-1") if len(parts) == 2 else ""
    return None


class TokenAuthMiddleware:
    """Sets `scope["user"]` and `scope["token"]` from a Bearer token. A wrong, expired or revoked token makes the
    socket anonymous (the consumer then closes it with 4401), even when a session cookie came along."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        raw = raw_token(scope)
        if raw is not None:
            token = await database_sync_to_async(authenticate_token)(raw) if raw else None
            scope = {**scope, "user": token.user if token else AnonymousUser(), "token": token}
        return await self.inner(scope, receive, send)
