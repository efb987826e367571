"""Following one pod's log into the workload's sink, without gaps or duplicates across broken connections.

The log is read with `timestamps=true`: every line starts with the kubelet's RFC 3339 time (nanoseconds).
The follower remembers the time of the last line it delivered and how many lines carried exactly that time
(the cursor). After a dropped connection it asks again from that time (`sinceTime`; the kubelet answers
lines at or after it) and skips what it already delivered: lines before the cursor's time, and the first
`count` lines at that time. The cursor is also what the controller stores, so a restarted controller
resumes where the last one stopped.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apps.runtime.kubernetes.client import KubeClient, KubeError

log = logging.getLogger("portal.kube")

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ?")
MAX_BACKOFF = 5.0


def stamp_ns(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time (any number of fraction digits), or None."""
    match = _STAMP.match(text)
    if not match:
        return None
    base, fraction, zone = match.groups()
    moment = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return int(moment.timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0"))


def split_line(line: str) -> tuple[int | None, str]:
    """(time in ns, text) of a timestamped log line; (None, line) when it carries no time."""
    match = _STAMP.match(line)
    if not match:
        return None, line
    return stamp_ns(line), line[match.end() :]


def since_time(ns: int) -> str:
    """`ns` as sinceTime, to the nanosecond. An API server that reads only whole seconds answers from the
    start of that second: more lines, which the cursor then skips."""
    seconds, nanos = divmod(ns, 10**9)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


@dataclass
class Cursor:
    """The last delivered line's time (ns) and how many delivered lines carried exactly that time."""

    ns: int = 0
    count: int = 0

    def as_list(self) -> list[int]:
        return [self.ns, self.count]

    @classmethod
    def of(cls, raw: Any) -> Cursor:
        if isinstance(raw, list | tuple) and len(raw) == 2:
            return cls(int(raw[0]), int(raw[1]))
        return cls()


class LogFollower:
    """A thread that streams one pod's log into `deliver(replica, lines)` until the container ends (or the
    pod is gone), resuming after broken connections."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        pod: str,
        *,
        replica: str,
        container: str = "",
        deliver: Callable[[str, list[str]], None],
        cursor: Cursor | None = None,
        idle_timeout: float = 300,
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.replica = replica
        self.container = container
        self.deliver = deliver
        self.cursor = cursor or Cursor()
        self.idle_timeout = idle_timeout
        self.on_done = on_done
        self.done = threading.Event()
        self.stopping = threading.Event()
        self.reconnects = 0
        self.delivered = 0
        self._response: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"logs-{pod}", daemon=True)

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading (what was delivered stays delivered)."""
        self.stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # the stream may be closing by itself at this very moment
                log.debug("closing the log stream of %s failed", self.pod, exc_info=True)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def snapshot(self) -> Cursor:
        with self._lock:
            return Cursor(self.cursor.ns, self.cursor.count)

    def _run(self) -> None:
        backoff = 0.5
        try:
            while not self.stopping.is_set():
                try:
                    self._follow()
                    return  # the stream ended by itself: the container is done
                except KubeError as exc:
                    if self.stopping.is_set() or exc.not_found:
                        return  # the pod is gone: nothing more will come
                    if exc.status == 400:  # e.g. "waiting to start: ContainerCreating": not yet
                        log.debug("%s", exc)
                    else:
                        log.info("%s; resuming", exc)
                    self.reconnects += 1
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
        except Exception:  # a bug: stop following this pod, never the controller
            log.exception("following the log of %s failed", self.pod)
        finally:
            self.done.set()
            self.on_done()

    def _follow(self) -> None:
        start = self.snapshot()
        seen = 0  # lines of this stream carrying exactly the cursor's time
        stream = self.client.pod_log(
            self.namespace,
            self.pod,
            container=self.container,
            since_time=since_time(start.ns) if start.ns else "",
            idle_timeout=self.idle_timeout,
            opened=self._opened,
        )
        try:
            for batch in stream:
                fresh, cursor, seen = fresh_lines(batch, self.snapshot(), seen)
                if fresh:
                    self.deliver(self.replica, fresh)
                    self.delivered += len(fresh)
                # Only now: a cursor saved by the controller never runs ahead of what the sink was given.
                with self._lock:
                    self.cursor = cursor
                if self.stopping.is_set():
                    return
        finally:
            self._response = None

    def _opened(self, response: Any) -> None:
        self._response = response


def fresh_lines(batch: list[str], cursor: Cursor, seen: int) -> tuple[list[str], Cursor, int]:
    """The lines of `batch` not delivered before `cursor`, the cursor after them, and how many lines of the
    stream so far carry exactly the new cursor's time (`seen`: the same count before this batch)."""
    fresh = []
    cursor = Cursor(cursor.ns, cursor.count)
    for line in batch:
        ns, text = split_line(line)
        if ns is None:  # no time: nothing to place it by; deliver it
            fresh.append(text)
            continue
        if ns < cursor.ns:
            continue
        if ns == cursor.ns:
            seen += 1
            if seen <= cursor.count:
                continue  # delivered before the connection broke
            cursor.count += 1
        else:
            cursor, seen = Cursor(ns, 1), 1
        fresh.append(text)
    return fresh, cursor, seen
