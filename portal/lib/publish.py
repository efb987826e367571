"""Publish to a Channels group from synchronous code without paying for a new event loop each time.

`async_to_sync(layer.group_send)` starts a fresh event loop per call, and channels_redis keeps one
connection per loop: every publish from a worker or the agent would reconnect to Redis. Here one
background loop per process sends messages in the order they were published.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger("portal.publish")


class _Publisher:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[tuple[str, dict[str, Any], Future | None]] | None = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="channel-publisher", daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.queue = asyncio.Queue()
        ready.set()
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        layer = get_channel_layer()
        assert self.queue is not None
        while True:
            group, message, done = await self.queue.get()
            try:
                await layer.group_send(group, message)
            except Exception as exc:  # the data is in the database; live delivery is best effort
                log.warning("publishing to %s failed: %s", group, exc)
                if done is not None:
                    done.set_exception(exc)
                continue
            if done is not None:
                done.set_result(None)

    def send(self, group: str, message: dict[str, Any], wait: bool) -> None:
        done: Future | None = Future() if wait else None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (group, message, done))  # type: ignore[union-attr]
        if done is not None:
            done.result(timeout=10)


_publisher: _Publisher | None = None
_pid: int | None = None
_lock = threading.Lock()


def publish(group: str, message: dict[str, Any], *, wait: bool = False) -> None:
    """Send `message` to `group`; in publish order, from any thread. `wait` blocks until it is sent."""
    publisher = _this_process_publisher()
    if publisher is None:
        # The embedded SQLite layer is a database write bound to the caller's thread: send inline.
        async_to_sync(get_channel_layer().group_send)(group, message)
        return
    publisher.send(group, message, wait)


def prepare() -> None:
    """Load the channel layer and start this process's publisher now, for a long-lived process whose first message
    should not wait for them (the agent: its first task's first lines waited ~120 ms)."""
    _this_process_publisher()


def _this_process_publisher() -> _Publisher | None:
    global _publisher, _pid
    if not type(get_channel_layer()).__module__.startswith("channels_redis"):
        return None
    with _lock:
        if _publisher is None or _pid != os.getpid():  # a forked worker needs a loop of its own
            _publisher, _pid = _Publisher(), os.getpid()
    return _publisher
