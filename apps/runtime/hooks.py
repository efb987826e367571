"""How a runtime hands output and state changes back to the portal without importing the apps above it.

The app that submits workloads (jobs, notebooks, serving) registers a `Listener` for a label key it puts on its
workloads, e.g. `{"task_run": "42"}`. The local agent streams each replica's lines and resource samples into the
listener's sink and tells it when the workload changes phase (in order, on one thread, so a slow listener never
delays a process start or exit). The usage summary of a finished workload comes back with its status
(`Status.usage`).

`Listener` is a base class: every method has a documented default, so a runtime calls each of them without asking
whether a listener has it.
"""

from __future__ import annotations

from typing import Protocol

from apps.runtime.secretenv import Secrets
from apps.runtime.workload import Phase, Status, Workload

Notices = list[tuple[Workload, Phase, Status | None]]


class Sink(Protocol):
    """Where a workload's output goes. It keeps its own batching delays: the agent only hands it lines and
    samples, and closes it when the workload ends."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None: ...

    def sample(self, cpu_percent: float, rss_bytes: int) -> None: ...

    def close(self) -> None: ...


class Listener:
    """What the runtime calls back for the workloads of one label. Subclass it and override what matters."""

    #: How the local agent's notifier (apps/runtime/local/notifier.py) delivers a batch of notices. True: the whole
    #: batch goes to `changed_many` inside the transaction that records the ends of its workloads, so an end and
    #: what the listener makes of it are one commit (a failure rolls back the listener's writes; the ends are
    #: recorded all the same). False: the ends are committed first, then each notice goes to `changed` on its own,
    #: a failure of one not stopping the next.
    batches_with_ends: bool = False

    def sink(self, workload: Workload, secrets: Secrets) -> Sink:
        """Where the workload's output goes; `secrets`: what its env resolved to (apps/runtime/secretenv.py), the
        values to mask and the secrets that no longer exist. Default: output is dropped."""
        return DiscardSink()

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        """The workload changed phase. `status`: the runtime's full record of an ended workload (what `poll` would
        return), when known; at a start, what the runtime knows then (Kubernetes: the image digest the pods were
        started from). Default: nothing."""

    def changed_many(self, notices: Notices) -> None:
        """Notices that queued up together, in order (see `batches_with_ends`). Default: each goes to `changed`."""
        for workload, phase, status in notices:
            self.changed(workload, phase, status)


_listeners: dict[str, Listener] = {}


def register(label: str, listener: Listener) -> None:
    """Called from an AppConfig.ready(): workloads labelled `label` report to `listener`."""
    _listeners[label] = listener


def listener_for(workload: Workload) -> Listener | None:
    for label, listener in _listeners.items():
        if label in workload.labels:
            return listener
    return None


def open_sink(workload: Workload, secrets: Secrets) -> Sink:
    """The sink of the workload's listener, or one that discards the output of a workload nobody listens to."""
    listener = listener_for(workload)
    return listener.sink(workload, secrets) if listener is not None else DiscardSink()


class DiscardSink:
    """For workloads nobody listens to: output is dropped."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        pass

    def sample(self, cpu_percent: float, rss_bytes: int) -> None:
        pass

    def close(self) -> None:
        pass
