"""Live logs of a pipeline run: the stored backlog, then the batches the LogWriter publishes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.jobs.logs import ROW_ID, ROW_REPLICA, ROW_SEQ, ROW_TASK, backlog_rows, last_seqs, run_log_group, task_rows
from apps.jobs.models import PipelineRun, TaskRun
from apps.jobs.orchestrator import run_status_snapshot

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404

BACKLOG_PAGE = 5000  # lines read from the database at a time
MESSAGE_LINES = 500  # lines per websocket message
# How often an open socket of an unfinished run compares what it sent with what is stored (one index lookup per
# attempt): lines published while the channel layer was down never arrive, and a gap at the end of an attempt has
# no later batch to reveal it.
CATCH_UP_SECONDS = 5.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogFilter:
    """What the browser asked for: lines after `after`, of some tasks (None: all), of one replica. A browser that
    reconnects also says, in `seen`, the highest seq it has of each attempt: of those it gets exactly the lines
    after that seq, whatever their ids (lines of concurrent attempts arrive out of id order, so `after`, its
    highest id, may be past lines it never got)."""

    after: int = 0
    task_ids: frozenset[int] | None = None
    replica: str | None = None
    seen: tuple[tuple[int, int], ...] = ()

    @classmethod
    def from_query_string(cls, query_string: bytes) -> LogFilter:
        """Parse `?after=&task=1&task=2,3&replica=&seen=<task>:<seq>,…`; raises ValueError on anything that is not
        an id."""
        params = parse_qs(query_string.decode("utf-8", "replace"))
        after = int(params["after"][-1]) if params.get("after") else 0
        if after < 0:
            raise ValueError("after must not be negative")
        task_ids = None
        if "task" in params:
            task_ids = frozenset(int(part) for value in params["task"] for part in value.split(",") if part.strip())
        replica = params["replica"][-1] if params.get("replica") else None
        seen: dict[int, int] = {}
        for value in params.get("seen", []):
            for pair in value.split(","):
                if pair.strip():
                    task, _colon, seq = pair.partition(":")
                    seen[int(task)] = int(seq)
        if any(value < 0 for pair in seen.items() for value in pair):
            raise ValueError("seen must not be negative")
        return cls(after=after, task_ids=task_ids, replica=replica, seen=tuple(sorted(seen.items())))

    def matches(self, row: list[Any]) -> bool:
        return (self.task_ids is None or row[ROW_TASK] in self.task_ids) and (
            self.replica is None or row[ROW_REPLICA] == self.replica
        )


@database_sync_to_async
def run_is_visible(user: Any, run_id: int, token: Any = None) -> bool:
    """Whether the user (through the API token the socket authenticated with, if any: its project only) sees the
    run."""
    return PipelineRun.objects.for_user(user, token=token).filter(pk=run_id).exists()


@database_sync_to_async
def attempts_exist(run_id: int, task_ids: frozenset[int]) -> bool:
    return TaskRun.objects.filter(run_id=run_id, pk__in=list(task_ids)).exists()


class RunLogConsumer(AsyncJsonWebsocketConsumer):
    """`ws/runs/<run_id>/logs/`: sends `{"type": "lines", "rows": [[id, task, node, attempt, replica, seq, ts,
    stream, text], ...]}` (apps.jobs.logs.ROW_FIELDS) and `{"type": "status", ...}`.

    It joins the run's group before it reads the backlog, so no line falls between the two. Each attempt numbers
    its lines without gaps (`seq`), and the socket keeps the highest seq it sent per attempt: a live batch's lines
    at or below it were in the backlog and are dropped; a batch that starts above the next one reveals lines that
    never arrived (published while the channel layer was down), which are read from the store and sent first. Lost
    lines that no later batch reveals (the end of an attempt) are found by a look at the store every
    CATCH_UP_SECONDS while the run is unfinished. Tasks flush concurrently, so batches of different attempts can
    arrive out of id order; within an attempt, id and seq grow together.
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
        if not await run_is_visible(user, run_id, self.scope.get("token")):
            await self.reject(CLOSE_NOT_FOUND)
            return
        try:
            self.filter = LogFilter.from_query_string(self.scope.get("query_string", b""))
        except ValueError:
            await self.reject(CLOSE_BAD_REQUEST)
            return
        self.run_id = run_id
        # Attempt id → the highest seq this socket sent of it (or read past, or the browser said it has).
        self.sent: dict[int, int] = dict(self.filter.seen)
        self.sending = asyncio.Lock()  # live batches and the periodic catch-up change `sent` one at a time
        self.group = run_log_group(run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Live batches wait in the layer until connect() returns: the consumer handles one message at a time.
        if self.filter.seen:
            # A reconnect: attempt by attempt, what the browser lacks (below `after` too); for attempts it has none
            # of, what is after `after`.
            await self.catch_up()
            self.backlog_last_id = self.filter.after
        else:
            self.backlog_last_id = await self.send_backlog(run_id)
        # The state now: status events sent before this socket joined would otherwise never arrive.
        snapshot = await database_sync_to_async(run_status_snapshot)(run_id)
        if snapshot is not None:
            await self.send_json({**snapshot, "type": "status"})
        if self.filter.task_ids is None or await attempts_exist(run_id, self.filter.task_ids):
            # (A socket for status only, as the dashboards' `task=0`, has no lines to miss.)
            self.catching_up = asyncio.create_task(self.keep_caught_up())

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
            for row in page:
                self.sent[row[ROW_TASK]] = max(self.sent.get(row[ROW_TASK], 0), row[ROW_SEQ])
            if page:
                last_id = page[-1][ROW_ID]
            if len(page) < BACKLOG_PAGE:
                return last_id

    async def send_missed(self, task_id: int, after_seq: int, before_seq: int | None) -> int:
        """Send the stored lines of one attempt between two seqs that this socket never sent (of an attempt neither
        it nor the browser knows: only those after the browser's `after`); returns the highest seq read."""
        highest = after_seq
        after_id = 0 if task_id in self.sent else self.filter.after
        while True:
            page = await database_sync_to_async(task_rows)(
                task_id, highest, before_seq, after_id=after_id, replica=self.filter.replica, limit=BACKLOG_PAGE
            )
            for start in range(0, len(page), MESSAGE_LINES):
                await self.send_json({"type": "lines", "rows": page[start : start + MESSAGE_LINES]})
            if page:
                highest = page[-1][ROW_SEQ]
            if len(page) < BACKLOG_PAGE:
                return highest

    async def catch_up(self) -> bool:
        """Send what is stored past what this socket sent, attempt by attempt; returns whether the run is over."""
        stored, finished = await database_sync_to_async(last_seqs)(self.run_id, self.filter.task_ids)
        async with self.sending:
            for task_id, last in stored.items():
                sent = self.sent.get(task_id, 0)
                if last > sent:
                    log.info("run %s, attempt %s: sending lines %s-%s that never arrived", self.run_id, task_id,
                             sent + 1, last)  # fmt: skip
                    read = await self.send_missed(task_id, sent, None)
                    self.sent[task_id] = max(self.sent.get(task_id, 0), last, read)
        return finished

    async def keep_caught_up(self) -> None:
        while True:
            await asyncio.sleep(CATCH_UP_SECONDS)
            try:
                if await self.catch_up():
                    return  # a finished run stores no more lines, and this look sent the last of them
            except Exception:  # the database is away for a moment: look again next time
                log.warning("catching up the log socket of run %s failed", self.run_id, exc_info=True)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "catching_up"):
            self.catching_up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.catching_up
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The browser has nothing to say; filters change by reconnecting."""

    async def log_lines(self, event: dict[str, Any]) -> None:
        if getattr(self, "backlog_last_id", None) is None:  # closed during connect
            return
        # A batch is one attempt's lines in increasing seq (and id) order, without gaps.
        rows = event["rows"]
        if not rows:
            return
        task_id = rows[0][ROW_TASK]
        if self.filter.task_ids is not None and task_id not in self.filter.task_ids:
            return
        async with self.sending:
            sent = self.sent.get(task_id, 0)
            first, last = rows[0][ROW_SEQ], rows[-1][ROW_SEQ]
            if last <= sent:  # read from the store already (backlog or catch-up)
                return
            if first > sent + 1:  # lines before this batch never arrived: from the store, first
                await self.send_missed(task_id, sent, first)
            self.sent[task_id] = last
            if first <= sent:
                rows = [row for row in rows if row[ROW_SEQ] > sent]
            if self.filter.replica is not None:
                rows = [row for row in rows if self.filter.matches(row)]
            if rows:
                await self.send_json({"type": "lines", "rows": rows})

    async def run_status(self, event: dict[str, Any]) -> None:
        payload = {key: value for key, value in event.items() if key != "type"}
        await self.send_json({**payload, "type": "status"})
