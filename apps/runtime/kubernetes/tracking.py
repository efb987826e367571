"""What the controller holds for one active workload, and for one cluster.

`Tracked`: the row's identity and last recorded state, its listener's sink (opened at the first log line),
one `LogFollower` per pod, the log cursors last saved, the Events read for its pending pods, and — once the
cluster says it ended — the final status, held until its logs are drained.

`Link`: a cluster's client and its watched collections, one `Watcher` per (namespace, resource).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from apps.runtime import hooks, secretenv
from apps.runtime.kubernetes.client import POD, KubeClient
from apps.runtime.kubernetes.manifests import LABEL_MANAGED, LABEL_UID, MANAGED_BY, Resource, label_value, resource_of
from apps.runtime.kubernetes.podlogs import Cursor, LogFollower
from apps.runtime.kubernetes.status import Observed
from apps.runtime.kubernetes.watch import Watcher
from apps.runtime.models import Cluster, KubeWorkload
from apps.runtime.workload import Workload

MANAGED_SELECTOR = f"{LABEL_MANAGED}={MANAGED_BY}"


@dataclass
class Tracked:
    row_id: int
    uid: str
    workload: Workload
    cluster_id: int
    namespace: str
    state: str
    reason: str
    replicas: dict[str, str]
    cursors: dict[str, list[int]]
    label: str = ""
    primary: Resource | None = None
    primary_name: str = ""
    followers: dict[str, LogFollower] = field(default_factory=dict)
    saved_cursors: dict[str, list[int]] = field(default_factory=dict)
    events: dict[str, list[dict]] = field(default_factory=dict)
    events_at: dict[str, float] = field(default_factory=dict)
    final: Observed | None = None  # ended on the cluster; recorded once its logs are drained
    waited: str = ""  # the last reason it gave while pending (why it waited, if it fails without running)
    drain_until: float = 0.0
    sink: hooks.Sink | None = None
    sink_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, row: KubeWorkload) -> Tracked:
        tracked = cls(
            row_id=row.pk,
            uid=row.uid,
            workload=Workload.from_dict(row.spec),
            cluster_id=row.cluster_id,
            namespace=row.namespace,
            state=row.state,
            reason=row.reason,
            replicas=dict(row.replicas or {}),
            cursors=dict(row.log_cursors or {}),
            label=label_value(row.uid),
            waited=row.reason if row.state == KubeWorkload.State.PENDING else "",
        )
        tracked.saved_cursors = dict(tracked.cursors)
        tracked.know_applied(row.applied)
        return tracked

    def know_applied(self, applied: list[dict[str, str]] | None) -> None:
        if applied and self.primary is None:
            first = applied[0]
            self.primary = resource_of(first["apiVersion"], first["kind"])
            self.primary_name = first["name"]

    # --- logs ----------------------------------------------------------------------------------------

    def deliver(self, replica: str, lines: list[str]) -> None:
        """Hand lines to the listener's sink (opened at the first line; a workload nobody listens to
        discards them). Called from the followers' threads."""
        with self.sink_lock:
            if self.sink is None:  # the pods have the values (their Secret): resolved here only to mask them
                self.sink = hooks.open_sink(self.workload, secretenv.resolve(self.workload)[1])
            self.sink.write_many(replica, "stdout", lines)

    def close_sink(self) -> None:
        with self.sink_lock:
            if self.sink is not None:
                self.sink.close()
                self.sink = None

    def cursor_of(self, pod: str) -> Cursor:
        return Cursor.of(self.cursors.get(pod))

    def current_cursors(self) -> dict[str, list[int]]:
        cursors = dict(self.cursors)
        for pod, follower in self.followers.items():
            snapshot = follower.snapshot()
            if snapshot.ns:
                cursors[pod] = snapshot.as_list()
        return cursors

    def stop_followers(self, wait: float = 0.0) -> None:
        for follower in self.followers.values():
            follower.stop()
        deadline = time.monotonic() + wait
        for follower in self.followers.values():
            follower.join(max(deadline - time.monotonic(), 0))

    def drained(self) -> bool:
        return all(follower.done.is_set() for follower in self.followers.values())


class Link:
    """A cluster's client and the collections watched on it."""

    def __init__(self, cluster: Cluster, client: KubeClient, resync: float, on_change: Callable[[], None]) -> None:
        self.cluster = cluster
        self.client = client
        self.resync = resync
        self.on_change = on_change
        self.watchers: dict[tuple[str, Resource], Watcher] = {}

    def watcher(self, namespace: str, resource: Resource) -> Watcher:
        """The running watch of our objects of `resource` in `namespace` (started on first use)."""
        key = (namespace, resource)
        watcher = self.watchers.get(key)
        if watcher is None:
            watcher = Watcher(
                self.client,
                resource,
                namespace,
                label_selector=MANAGED_SELECTOR,
                resync=self.resync,
                on_change=self.on_change,
            ).start()
            self.watchers[key] = watcher
        return watcher

    def pods(self, namespace: str, label: str) -> list[dict]:
        return [
            pod
            for pod in self.watcher(namespace, POD).items()
            if (pod["metadata"].get("labels") or {}).get(LABEL_UID) == label
        ]

    def keep_only(self, needed: set[tuple[str, Resource]]) -> None:
        for key in list(self.watchers):
            if key not in needed:
                self.watchers.pop(key).stop()

    def stop(self) -> None:
        for watcher in self.watchers.values():
            watcher.stop()
        self.watchers.clear()
