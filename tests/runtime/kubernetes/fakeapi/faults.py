"""Fault injection: the next N requests matching (method, path regex, query regex) misbehave.

Actions:
- "status": answer `status` with a Status body (500, 503, 429 with Retry-After, 409, 410 …)
- "drop":   close the connection without answering (the client sees a connection error)
- "lose":   do what the request asks, then close the connection without answering (a create that
            happened although the client never heard so)
- "gone":   a watch answers 200 and then an ERROR event with code 410 (the API server's "too old
            resource version"), and ends
- "slow":   answer normally, after `delay` seconds
- "hold":   wait until the test calls `release()`, then do what the request asks and answer (to a client that may
            be gone by then: a worker killed while its create was in flight)
- "mute":   a watch answers 200 and then stays silent until its timeout (events are missed)
- "cut":    a watch or a followed log sends `after` items, then the connection is cut mid-stream
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field


@dataclass
class Fault:
    action: str
    method: str | None = None
    path: str = ""
    query: str = ""
    status: int = 500
    reason: str = "InternalError"
    message: str = "injected fault"
    retry_after: float | None = None
    after: int = 0
    delay: float = 0.0
    times: int = 1
    hits: int = 0
    gate: threading.Event = field(default_factory=threading.Event, repr=False)  # "hold": set by release()
    _path_re: re.Pattern = field(init=False, repr=False)
    _query_re: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._path_re = re.compile(self.path)
        self._query_re = re.compile(self.query)

    def release(self) -> None:
        self.gate.set()

    def matches(self, method: str, path: str, query: str) -> bool:
        return (
            self.times > 0
            and (self.method is None or self.method == method)
            and bool(self._path_re.search(path))
            and bool(self._query_re.search(query))
        )


WATCH = r"(?i)(^|&)watch=(1|t|true)(&|$)"
_REASONS = {
    409: "AlreadyExists",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class Faults:
    """The injected faults, in the order added; each is used up after `times` matching requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, method: str, path: str, query: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path, query):
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    # --- the common cases ----------------------------------------------------------------------------

    def fail(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        *,
        times: int = 1,
        query: str = "",
        retry_after: float | None = None,
        message: str = "injected fault",
    ) -> Fault:
        reason = _REASONS.get(status, "InternalError")
        return self.add(
            Fault(
                "status",
                method,
                path,
                query,
                status=status,
                reason=reason,
                message=message,
                retry_after=retry_after,
                times=times,
            )
        )

    def drop(self, method: str | None, path: str, *, times: int = 1, query: str = "") -> Fault:
        return self.add(Fault("drop", method, path, query, times=times))

    def slow(self, method: str | None, path: str, delay: float, *, times: int = 1, query: str = "") -> Fault:
        return self.add(Fault("slow", method, path, query, delay=delay, times=times))

    def hold(self, method: str | None, path: str, *, times: int = 1, query: str = "") -> Fault:
        return self.add(Fault("hold", method, path, query, times=times))

    def lose(self, method: str | None, path: str, *, times: int = 1, query: str = "") -> Fault:
        return self.add(Fault("lose", method, path, query, times=times))

    def gone(self, path: str, *, times: int = 1) -> Fault:
        """The next watch on `path` answers an ERROR event with code 410."""
        return self.add(Fault("gone", "GET", path, WATCH, times=times))

    def mute_watch(self, path: str, *, times: int = 1) -> Fault:
        return self.add(Fault("mute", "GET", path, WATCH, times=times))

    def cut_watch(self, path: str, after: int, *, times: int = 1) -> Fault:
        return self.add(Fault("cut", "GET", path, WATCH, after=after, times=times))

    def cut_log(self, pod: str, after: int, *, times: int = 1) -> Fault:
        return self.add(Fault("cut", "GET", rf"/pods/{re.escape(pod)}/log$", "", after=after, times=times))
