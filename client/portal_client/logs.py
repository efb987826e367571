"""A run's log: the stored history (paged, filtered, searched), the whole text, and live lines over the websocket."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from portal_client._http import Http
from portal_client.errors import NotFound, TransportError, Unauthorized
from portal_client.models import FINISHED, LogLine

CLOSE_CODES = {4401: Unauthorized, 4404: NotFound}


class Logs:
    # Seconds without a message after which `follow` asks the API whether the run has finished.
    quiet_seconds = 5.0

    def __init__(self, http: Http) -> None:
        self.http = http

    def history(
        self,
        run_id: int,
        *,
        node: str | None = None,
        replica: str | None = None,
        task: int | None = None,
        q: str | None = None,
        after: int = 0,
        page_size: int = 1000,
    ) -> Iterator[LogLine]:
        """Every stored line (of a node, replica or attempt; containing `q`), in storage order, page by page."""
        params = {"node": node, "replica": replica, "task": task, "q": q, "after": after or None, "limit": page_size}
        return (LogLine.from_api(item) for item in self.http.pages(f"runs/{run_id}/logs/", params))

    def download(self, run_id: int, node: str | None = None) -> Iterator[bytes]:
        """The whole log as text (`<time> [<node>#<attempt>/<replica>] <text>` lines), streamed."""
        with self.http.stream("GET", f"runs/{run_id}/logs/download/", params={"node": node} if node else None) as r:
            yield from r.iter_bytes()

    def ws_url(self, run_id: int, **query: Any) -> str:
        parts = urlsplit(self.http.url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        query = {key: value for key, value in query.items() if value is not None}
        return f"{scheme}://{parts.netloc}{parts.path}/ws/runs/{run_id}/logs/" + (
            f"?{urlencode(query)}" if query else ""
        )

    def follow(
        self, run_id: int, *, task: int | None = None, replica: str | None = None, until_finished: bool = True
    ) -> Iterator[LogLine]:
        """The stored lines, then live ones as they are written, until the run finishes (every line once).

        The websocket authenticates with `Authorization: Bearer <token>`, and says where it comes from (`Origin`,
        the portal's own address), as the portal's origin check asks of every websocket."""
        headers = {"Origin": self.http.url}
        if self.http.token:
            headers["Authorization"] = f"Bearer {self.http.token}"
        seen: set[int] = set()
        url = self.ws_url(run_id, task=task, replica=replica)
        try:
            ws = connect(url, additional_headers=headers, open_timeout=30, max_size=None)
        except InvalidStatus as exc:
            raise TransportError(f"the log socket was refused: HTTP {exc.response.status_code}") from exc
        except OSError as exc:
            raise TransportError(f"cannot reach {self.http.url}: {exc}") from exc
        finished = False
        with ws:
            while True:
                try:
                    message = json.loads(ws.recv(timeout=self.quiet_seconds))
                except TimeoutError:
                    # Quiet for a while: status events travel through the portal's channel layer, which may be down
                    # (the socket still catches up lines from the store), so ask the API whether the run ended.
                    if until_finished and self.http.get(f"runs/{run_id}/")["status"] in FINISHED:
                        finished = True
                        break
                    continue
                except ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd is not None else None
                    if code in CLOSE_CODES:
                        raise CLOSE_CODES[code](code - 4000, {"detail": _close_message(code, run_id)}) from None
                    break
                if message.get("type") == "lines":
                    for row in message["rows"]:
                        line = LogLine.from_row(row)
                        if line.id not in seen:
                            seen.add(line.id)
                            yield line
                elif message.get("type") == "status" and message.get("status") in FINISHED:
                    finished = True
                    if until_finished:
                        break
        if finished or not until_finished:
            # Lines stored just before the end may still have been on their way: the store has them all.
            for line in self.history(run_id, task=task, replica=replica):
                if line.id not in seen:
                    seen.add(line.id)
                    yield line


def _close_message(code: int, run_id: int) -> str:
    if code == 4401:
        return "The log socket needs a valid token (portal login)."
    return f"No run {run_id} that you can access."
