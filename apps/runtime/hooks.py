"""How a runtime hands output and state changes back to the portal without importing the apps above it.

The app that submits workloads (jobs today; notebooks and serving later) registers a `Listener` for a
label key it puts on its workloads, e.g. `{"task_run": "42"}`. The local agent streams each replica's
lines and resource samples into the listener's sink and tells it when the workload changes phase
(in order, on one thread, so a slow listener never delays a process start or exit). The usage summary of
a finished workload comes back with its status (`Status.usage`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from apps.runtime.workload import Phase, Status, Workload


class Sink(Protocol):
    """Where a workload's output goes. It keeps its own batching delays: the agent only hands it lines and
    samples, and closes it when the workload ends."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None: ...

    def sample(self, cpu_percent: float, rss_bytes: int) -> None: ...

    def close(self) -> None: ...


class Listener(Protocol):
    def sink(self, workload: Workload) -> Sink: ...

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        """`status`: the runtime's full record of an ended workload (what `poll` would return), when known; at a
        start, what the runtime knows then (Kubernetes: the image digest the pods were started from)."""

    def logs(self, workload_uid: str, since: int) -> Iterator[tuple[str, int, str, str, str]]: ...


_listeners: dict[str, Listener] = {}


def register(label: str, listener: Listener) -> None:
    """Called from an AppConfig.ready(): workloads labelled `label` report to `listener`."""
    _listeners[label] = listener


def listener_for(workload: Workload) -> Listener | None:
    for label, listener in _listeners.items():
        if label in workload.labels:
            return listener
    return None


class DiscardSink:
    """For workloads nobody listens to: output is dropped (and said so once)."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        pass

    def sample(self, cpu_percent: float, rss_bytes: int) -> None:
        pass

    def close(self) -> None:
        pass
