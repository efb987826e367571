"""Live logs of a pipeline run: the stored backlog, then the batches the LogWriter publishes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.jobs.logs import ROW_ID, ROW_REPLICA, ROW_TASK, backlog_rows, run_log_group
from apps.jobs.models import PipelineRun
from apps.jobs.orchestrator import run_status_snapshot

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404

BACKLOG_PAGE = 5000  # lines read from the database at a time
MESSAGE_LINES = 500  # lines per websocket message


@dataclass(frozen=True)
class LogFilter:
    """What the browser asked for: lines after `after`, of some tasks (None: all), of one replica."""

    after: int = 0
    task_ids: frozenset[int] | None = None
    replica: str | None = None

    @classmethod
    def from_query_string(cls, query_string: bytes) -> LogFilter:
        """Parse `?after=&task=1&task=2,3&replica=`; raises ValueError on anything that is not an id."""
        params = parse_qs(query_string.decode("utf-8", "replace"))
        after = int(params["after"][-1]) if params.get("after") else 0
        if after < 0:
            raise ValueError("after must not be negative")
        task_ids = None
        if "task" in params:
            task_ids = frozenset(int(part) for value in params["task"] for part in value.split(",") if part.strip())
        replica = params["replica"][-1] if params.get("replica") else None
        return cls(after=after, task_ids=task_ids, replica=replica)

    def matches(self, row: list[Any]) -> bool:
        return (self.task_ids is None or row[ROW_TASK] in self.task_ids) and (
            self.replica is None or row[ROW_REPLICA] == self.replica
        )


@database_sync_to_async
def run_is_visible(user: Any, run_id: int) -> bool:
    return PipelineRun.objects.for_user(user).filter(pk=run_id).exists()


class RunLogConsumer(AsyncJsonWebsocketConsumer):
    """`ws/runs/<run_id>/logs/`: sends `{"type": "lines", "rows": [[id, task, node, attempt, replica, seq, ts,
    stream, text], ...]}` (apps.jobs.logs.ROW_FIELDS) and `{"type": "status", ...}`.

    It joins the run's group before it reads the backlog, so no line falls between the two; the lines
    both read and received are dropped by id. Only the overlap is deduplicated: tasks flush concurrently,
    so batches can arrive out of id order, and each live line is published once.
    """

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        # orjson: the standard library's encoder took 1.5 ms of the web process's ~4.5 ms per 1,000 live lines
        # (bench/logs.py); orjson takes 0.1.
        return orjson.dumps(content).decode()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.reject(CLOSE_UNAUTHENTICATED)
            return
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        # The same answer for a missing run and another project's run: never reveal that it exists.
        if not await run_is_visible(user, run_id):
            await self.reject(CLOSE_NOT_FOUND)
            return
        try:
            self.filter = LogFilter.from_query_string(self.scope.get("query_string", b""))
        except ValueError:
            await self.reject(CLOSE_BAD_REQUEST)
            return
        self.group = run_log_group(run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Live batches wait in the layer until connect() returns: the consumer handles one message at a time.
        self.backlog_last_id = await self.send_backlog(run_id)
        # The state now: status events sent before this socket joined would otherwise never arrive.
        snapshot = await database_sync_to_async(run_status_snapshot)(run_id)
        if snapshot is not None:
            await self.send_json({**snapshot, "type": "status"})

    async def reject(self, code: int) -> None:
        # Accept, then close with an application code: the browser then knows why and not to retry.
        await self.accept()
        await self.close(code=code)

    async def send_backlog(self, run_id: int) -> int:
        """Send the stored lines after `filter.after`; returns the id of the last one sent."""
        last_id = self.filter.after
        while True:
            page = await database_sync_to_async(backlog_rows)(
                run_id,
                after_id=last_id,
                task_ids=self.filter.task_ids,
                replica=self.filter.replica,
                limit=BACKLOG_PAGE,
            )
            for start in range(0, len(page), MESSAGE_LINES):
                await self.send_json({"type": "lines", "rows": page[start : start + MESSAGE_LINES]})
            if page:
                last_id = page[-1][ROW_ID]
            if len(page) < BACKLOG_PAGE:
                return last_id

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The browser has nothing to say; filters change by reconnecting."""

    async def log_lines(self, event: dict[str, Any]) -> None:
        last_id = getattr(self, "backlog_last_id", None)
        if last_id is None:  # closed during connect
            return
        # A batch is one attempt's lines in increasing id order (one sequence call); only batches stored while
        # the backlog was read overlap it.
        rows = event["rows"]
        if rows and rows[0][ROW_ID] <= last_id:
            rows = [row for row in rows if row[ROW_ID] > last_id]
        if self.filter.task_ids is not None or self.filter.replica is not None:
            rows = [row for row in rows if self.filter.matches(row)]
        if rows:
            await self.send_json({"type": "lines", "rows": rows})

    async def run_status(self, event: dict[str, Any]) -> None:
        payload = {key: value for key, value in event.items() if key != "type"}
        await self.send_json({**payload, "type": "status"})
