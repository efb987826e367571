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

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from apps.runtime.secretenv import Secrets
from apps.runtime.workload import Phase, Status, Workload

Notices = list[tuple[Workload, Phase, Status | None]]
if TYPE_CHECKING:  # usage.py reads the describers registered here
    from apps.runtime.usage import Holder


class Sink(Protocol):
    """Where a workload's output goes. It keeps its own batching delays: the agent only hands it lines and
    samples, and closes it when the workload ends. A sample is one replica's (`replica`: "0" for a lone one) at one
    tick: CPU % of one core and resident bytes of its process tree, and its GPU utilisation % and GPU memory bytes
    (None where the machine has no GPU, or the replica asked for none and uses none)."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None: ...

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None: ...

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


# What a workload runs, in the words of the app that submitted it (the capacity page, a project's overview): the
# describer of a label fills in `kind`, `what`, `user`, `url` and `project_name` of the holders carrying that label
# whose objects it finds, in a fixed number of queries.
Describer = Callable[[list["Holder"]], None]
_describers: dict[str, Describer] = {}


def register_describer(label: str, describe: Describer) -> None:
    """Called from an AppConfig.ready(): active workloads labelled `label` are described by `describe`."""
    _describers[label] = describe


def described_labels() -> list[str]:
    return list(_describers)


def describer(label: str) -> Describer:
    return _describers[label]


# What a workload uses now, measured (the capacity page, a project's overview): the measurer of a label sets
# `measured` (apps/runtime/usage.py `Measured`) on the holders carrying that label from what its samples say, in a
# fixed number of queries; a holder nobody measures has none.
_measurers: dict[str, Describer] = {}


def register_measurer(label: str, measure: Describer) -> None:
    """Called from an AppConfig.ready(): active workloads labelled `label` are measured by `measure`."""
    _measurers[label] = measure


def measurers() -> dict[str, Describer]:
    return dict(_measurers)


@dataclass(frozen=True)
class RegistryCredentials:
    """What a private registry's dockerconfigjson Secret holds for an image (`registry` empty: the image's own)."""

    image: str
    registry: str
    username: str
    password: str


# Registry credentials are referenced, never carried: a workload's label names the object that holds them (jobs:
# `image` → an Image's pk) and the app that owns that label reads them when the workload is applied, so a password
# changed after the dispatch is the one the cluster gets, and the stored spec holds no credential.
CredentialsResolver = Callable[[str], RegistryCredentials | None]
_credentials: dict[str, CredentialsResolver] = {}


def register_registry_credentials(label: str, resolve: CredentialsResolver) -> None:
    """Called from an AppConfig.ready(): `resolve(value of the label)` gives a labelled workload's credentials."""
    _credentials[label] = resolve


def registry_credentials(label: str, value: str) -> RegistryCredentials | None:
    resolve = _credentials.get(label)
    return resolve(value) if resolve is not None else None


# What a sandboxed local workload may read besides its project's work folders (apps/runtime/local/sandbox.py): each
# app that owns such files names, read-only, those this workload may see, having checked they are its project's own
# (datasets: the materialised versions its command or env names; serving: a model server's model). The sandbox binds
# those that exist.
ReadablePaths = Callable[[Workload, dict[str, str]], list[Path]]
_readable: list[ReadablePaths] = []


def register_readable_paths(paths: ReadablePaths) -> None:
    """Called from an AppConfig.ready(): `paths(workload, env)` lists files the sandboxed workload may read."""
    if paths not in _readable:
        _readable.append(paths)


def readable_paths(workload: Workload, env: dict[str, str]) -> list[Path]:
    return [path for paths in _readable for path in paths(workload, env)]


class DiscardSink:
    """For workloads nobody listens to: output is dropped."""

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        pass

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None:
        pass

    def close(self) -> None:
        pass
