"""The notebook proxy (websockets): kernels, terminals, events — any socket under `/notebook/<pk>/`.

The same checks as the HTTP proxy (apps/notebooks/proxy.py), all made before anything goes upstream: a logged-in
session, the page's Origin is the portal's own (a notebook socket runs code: a page of another site must not open
one with the user's cookies), and the notebook is the user's and running. A refusal is an HTTP answer to the
handshake where the server supports the Websocket Denial Response extension (uvicorn does): 403, 404, 503 or
502 like the HTTP proxy; elsewhere the socket is accepted and closed at once with 4000 + that status (4404, …).

Then it opens the same path on the server (with the token, the subprotocols the browser offered), accepts the
browser with the subprotocol the server chose, and relays frames both ways as they are (text stays text,
binary stays binary; one task per direction, so order is kept). Whichever side closes, the other is closed with
the same code. A relay uses no channel layer: no Redis subscription per socket, and no layer read that could
time out while a kernel sits idle for minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.typing import Subprotocol

from apps.notebooks.models import Notebook
from apps.notebooks.proxy import kept_cookies, notebook_for
from portal.lib.origins import trusted_origin

logger = logging.getLogger(__name__)

CLOSE_ABNORMAL = 1011  # the server vanished without a close frame (1006 cannot be sent)
# Codes that describe a missing close frame and may not be sent in one.
UNSENDABLE = frozenset({1005, 1006, 1015})
MAX_MESSAGE = 256 * 1024 * 1024  # a kernel output (an image, a big table) is one message
# Jupyter answers a kernel socket's handshake once the kernel replied to kernel_info (it waits up to 60 s for a
# kernel that is still starting): wait longer than that before calling the server unreachable.
KERNEL_READY_TIMEOUT = 90
NO_CHANNEL_LAYER = "notebook-proxy: none"  # an alias no setting defines: get_channel_layer() gives None


@database_sync_to_async
def find_notebook(user: Any, pk: int) -> Notebook | None:
    return notebook_for(user, pk)


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def same_origin(scope: dict) -> bool:
    """The handshake's Origin is the portal's own origin (scheme, host and port), or a trusted one."""
    origin, host = header(scope, b"origin"), header(scope, b"host")
    if not origin or origin == "null" or not host:
        return False
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    if urlsplit(origin).scheme == "https" and scheme == "http":
        # TLS ended at a proxy in front of the portal: the browser's page is https all the same.
        scheme = "https"
    return trusted_origin(origin, f"{scheme}://{host}")


def close_code(code: int | None) -> int:
    return 1000 if code is None or code == 1005 else (CLOSE_ABNORMAL if code in UNSENDABLE else code)


class NotebookProxyConsumer(AsyncWebsocketConsumer):
    """`notebook/<pk>/<anything>`: relays one websocket of the user's own running notebook server."""

    channel_layer_alias = NO_CHANNEL_LAYER
    upstream: ClientConnection | None = None
    pump: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.deny(403, "Log in to the portal first.")
        if not same_origin(self.scope):
            await self.deny(403, "Cross-site websocket refused.")
        notebook = await find_notebook(user, int(self.scope["url_route"]["kwargs"]["pk"]))
        if notebook is None or any(part in (".", "..") for part in self.scope["path"].split("/")):
            await self.deny(404, "No such notebook.")
        assert notebook is not None
        if notebook.status != Notebook.Status.RUNNING or not notebook.upstream:
            await self.deny(503, "The notebook is not running.")
        try:
            self.upstream = await self.open_upstream(notebook)
        except InvalidStatus as exc:  # the server refused (no such kernel: 404, …): the browser hears the same
            await self.deny(exc.response.status_code, "The notebook server refused the socket.")
        except (OSError, TimeoutError, WebSocketException) as exc:
            logger.warning("notebook proxy: websocket %s failed: %r", self.scope["path"], exc)
            await self.deny(502, "The notebook server did not answer.")
        assert self.upstream is not None
        await self.accept(subprotocol=self.upstream.subprotocol)
        self.pump = asyncio.create_task(self.relay_upstream(self.upstream))

    async def open_upstream(self, notebook: Notebook) -> ClientConnection:
        target = self.scope.get("raw_path") or self.scope["path"].encode()
        query = self.scope.get("query_string", b"")
        url = notebook.upstream.rstrip("/").replace("http", "ws", 1) + target.decode("latin-1")
        if query:
            url += "?" + query.decode("latin-1")
        headers = []
        if notebook.token:
            headers.append(("Authorization", f"token {notebook.token}"))
        cookies = kept_cookies(value.decode("latin-1") for key, value in self.scope["headers"] if key == b"cookie")
        if cookies:
            headers.append(("Cookie", "; ".join(cookies)))
        if user_agent := header(self.scope, b"user-agent"):
            headers.append(("User-Agent", user_agent))
        return await connect(
            url,
            additional_headers=headers,
            user_agent_header=None,
            subprotocols=[Subprotocol(name) for name in self.scope.get("subprotocols", [])] or None,
            # No Origin: the server would compare it with its own host and refuse; the portal checked it.
            origin=None,
            compression=None,  # loopback or a cluster network: compressing costs CPU and saves nothing
            max_size=MAX_MESSAGE,
            open_timeout=KERNEL_READY_TIMEOUT,
            close_timeout=3,
            proxy=None,
        )

    async def deny(self, status: int, text: str) -> None:
        """Refuse the handshake with HTTP `status` and end the consumer (raises StopConsumer)."""
        if "websocket.http.response" in self.scope.get("extensions", {}):
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
            await self.base_send({"type": "websocket.http.response.start", "status": status, "headers": headers})
            await self.base_send({"type": "websocket.http.response.body", "body": text.encode()})
        else:  # accept, then close with an application code: the page learns why and need not retry
            await self.accept()
            await self.close(code=4000 + status)
        raise StopConsumer()

    async def relay_upstream(self, upstream: ClientConnection) -> None:
        """Server → browser, in order; when the server closes, the browser is closed with its code."""
        try:
            async for message in upstream:
                if isinstance(message, str):
                    await self.send(text_data=message)
                else:
                    await self.send(bytes_data=message)
        except ConnectionClosed:
            pass
        except Exception:  # the browser's side failed under us (it went away): its disconnect cleans up
            logger.debug("notebook proxy: relay to the browser ended", exc_info=True)
            return
        with contextlib.suppress(Exception):
            await self.close(code=close_code(upstream.close_code), reason=upstream.close_reason or None)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Browser → server, in order (Channels hands over one message at a time)."""
        if self.upstream is None:
            return
        with contextlib.suppress(ConnectionClosed):  # the server closed: relay_upstream closes the browser
            await self.upstream.send(text_data if text_data is not None else bytes_data)

    async def disconnect(self, code: int) -> None:
        if self.pump is not None and self.pump is not asyncio.current_task():
            self.pump.cancel()
        if self.upstream is not None:
            with contextlib.suppress(Exception):
                await self.upstream.close(code=close_code(code))
