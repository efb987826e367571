"""The Kubernetes controller (`manage.py runkube`): the single leader that watches the workloads' objects, follows
their pods' logs and records what happens. The units of work — apply, delete, inventory, repair — are Celery tasks
on the `kubernetes` queue (apps/runtime/tasks.py); this process holds only what must be long-lived: watch streams
and log follows (docs/kubernetes.md, "Leader and tasks").

Level-triggered: every pass (each second, at once when a datagram or a watch sees a change) reads the active rows
that have objects on a cluster and compares them with what the watches say:

- observe:   the primary object's phase (phase_of), with reasons from its pods and their Events
             (status.py); each phase change updates the row and tells the listener
- logs:      one LogFollower per started pod, into the listener's sink; a workload that ended is recorded
             (and its sink closed) only when its pods' logs are drained, so the run sees its last lines first
- cancel:    a row with cancel_requested whose objects the delete task removed (`applied` is empty) ends cancelled
- repair:    created objects that are gone → LOST; pods that cannot pull their image fail after a grace period
             (their objects are deleted by a task)

A pending row not yet created is the apply task's, not this loop's. One controller leads at a time (the oldest live
one); another waits while the leader heartbeats, so a rolling update never runs two sets of log followers.
Heartbeats reuse the `Agent` table (runtime.py).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection
from django.utils import timezone

from apps.outbox.services import enqueue
from apps.runtime import hooks, tasks
from apps.runtime.kubernetes.client import EVENT, POD, KubeError, client_for, setting
from apps.runtime.kubernetes.manifests import LABEL_UID, log_container, phase_of, replica_of
from apps.runtime.kubernetes.podlogs import LogFollower
from apps.runtime.kubernetes.runtime import live_controllers
from apps.runtime.kubernetes.status import Observed, container_started, observe
from apps.runtime.kubernetes.tracking import Link, Tracked
from apps.runtime.models import Agent, Cluster, KubeWorkload
from apps.runtime.workload import Phase, Status

log = logging.getLogger("portal.kube")

ACTIVE = [KubeWorkload.State.PENDING, KubeWorkload.State.RUNNING]


@dataclass(frozen=True)
class Timing:
    """The controller's intervals in seconds (PORTAL_KUBE_TICK, _HEARTBEAT, … in settings or the environment)."""

    tick: float = 1.0  # the longest wait between passes
    heartbeat: float = 2.0
    resync: float = 60.0  # full relist of every watched collection
    pull_grace: float = 120.0  # an image that cannot be pulled for this long fails the workload
    log_drain: float = 30.0  # the longest wait for an ended workload's logs
    log_idle: float = 300.0  # a log stream silent this long is reopened
    events: float = 10.0  # how often the Events of a pending pod are read

    @classmethod
    def from_settings(cls) -> Timing:
        return cls(**{name: setting(name.upper(), getattr(cls, name)) for name in cls.__dataclass_fields__})


class Controller:
    def __init__(self, timing: Timing | None = None) -> None:
        self.timing = timing or Timing.from_settings()
        self.stopping = threading.Event()
        self.crashed = False
        self.leading = False
        self.nudge = threading.Event()
        self.tracked: dict[int, Tracked] = {}
        self.links: dict[int, Link] = {}
        self.closing: set[int] = set()  # rows handed to the notifier for their final record
        self.closing_lock = threading.Lock()
        self.notices: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.agent = Agent.objects.create(
            kind=Agent.Kind.KUBERNETES,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            address="{}:{}".format(*self.sock.getsockname()),
            capacity={"runtime": "kubernetes"},
        )
        self._threads = [
            threading.Thread(target=self._deliver_notices, name="kube-notify", daemon=True),
            threading.Thread(target=self._listen, name="kube-wake", daemon=True),
            threading.Thread(target=self._beat, name="kube-heartbeat", daemon=True),
        ]

    # --- the loop ------------------------------------------------------------------------------------

    def run_forever(self) -> None:
        log.info("controller %s ready on %s", self.agent.pk, self.agent.address)
        for thread in self._threads:
            thread.start()
        try:
            while not self.stopping.is_set():
                try:
                    if self.leading:
                        self.step()
                    elif self.tracked or self.links:  # another controller took over: let go of everything
                        self._release(save=True)
                except DatabaseError:
                    log.exception("database error in the controller loop")
                    connection.close()
                    self.stopping.wait(1)
                self.nudge.wait(self.timing.tick)
                self.nudge.clear()
        finally:
            if self.crashed:
                self._die()
            else:
                self.shutdown()

    def wake(self) -> None:
        self.nudge.set()

    def _listen(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sock.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            self.nudge.set()

    def _beat(self) -> None:
        """Heartbeats on a thread of their own, so that a pass blocked on a slow cluster never makes this
        controller look dead (and a second one start working beside it)."""
        try:
            while not self.stopping.is_set():
                try:
                    self.heartbeat()
                except DatabaseError:
                    log.exception("heartbeat failed")
                    connection.close()
                self.stopping.wait(self.timing.heartbeat)
        finally:
            connection.close()

    def heartbeat(self) -> None:
        Agent.objects.filter(pk=self.agent.pk).update(heartbeat_at=timezone.now())
        leader = live_controllers().order_by("started_at", "pk").values_list("pk", flat=True).first()
        leading = leader == self.agent.pk
        if leading != self.leading:
            log.info("controller %s %s", self.agent.pk, "leads" if leading else "stands by")
            self.leading = leading
            self.wake()

    def step(self) -> None:
        # What is being recorded is looked at before the rows are read, never after: a row the notifier records
        # (and lets go of) between the two would otherwise be read as still active yet not being recorded, and be
        # taken up again as new work (cancelled twice, observed or applied again after its end).
        with self.closing_lock:
            closing = set(self.closing)
        rows = list(
            KubeWorkload.objects.filter(state__in=ACTIVE).select_related("cluster").defer("spec", "log_cursors")
        )
        active = set()
        for row in rows:
            if row.pk in closing or not (row.created or row.cancel_requested):
                continue  # a row not yet created is the apply task's
            active.add(row.pk)
            tracked = self.tracked.get(row.pk) or self._track(row)
            try:
                if tracked.final is not None:
                    self._drain(tracked)
                elif row.cancel_requested:
                    if not row.applied:  # the delete task removed its objects (or nothing was created)
                        self._end(tracked, Observed(Phase.CANCELLED, "cancelled", replicas=tracked.replicas))
                else:
                    self._observe(row, tracked)
            except KubeError as exc:  # the cluster cannot be reached or refused: the next pass tries again
                log.warning("%s: %s", row.uid, exc)
        for pk in set(self.tracked) - active:
            if pk not in closing:  # ended elsewhere (e.g. cancelled before it was applied)
                self.tracked.pop(pk).stop_followers()
        self._save_cursors()
        self._prune_watchers()

    # --- the work on one row -------------------------------------------------------------------------

    def _track(self, row: KubeWorkload) -> Tracked:
        full = KubeWorkload.objects.only("spec", "log_cursors", "applied").get(pk=row.pk)
        row.spec, row.log_cursors = full.spec, full.log_cursors
        tracked = self.tracked[row.pk] = Tracked.of(row)
        return tracked

    def link(self, cluster: Cluster) -> Link:
        client = client_for(cluster)  # cached; rebuilt when the kubeconfig changed
        link = self.links.get(cluster.pk)
        if link is None or link.client is not client:
            if link is not None:
                link.stop()
            link = self.links[cluster.pk] = Link(cluster, client, self.timing.resync, self.wake)
        link.cluster = cluster
        return link

    def _observe(self, row: KubeWorkload, tracked: Tracked) -> None:
        if tracked.primary is None:
            tracked.know_applied(KubeWorkload.objects.values_list("applied", flat=True).get(pk=row.pk))
        link = self.link(row.cluster)
        primaries = link.watcher(row.namespace, tracked.primary)
        pods_watch = link.watcher(row.namespace, POD)
        if not (primaries.synced.is_set() and pods_watch.synced.is_set()):
            return
        primary = primaries.get(tracked.primary_name)
        if primary is None:
            # Absent from the watch: make sure (it may be newer than the watch's last event).
            primary = link.client.find(tracked.primary, row.namespace, tracked.primary_name)
            if primary is None:
                if KubeWorkload.objects.filter(pk=row.pk, cancel_requested=True).exists():
                    return  # deleted by the delete task since this pass read the row: the next pass ends it
                reason = (
                    f"the {tracked.primary.kind} {tracked.primary_name} is gone from cluster {row.cluster.name} "
                    "(deleted outside the portal?)"
                )
                self._end(tracked, Observed(Phase.LOST, reason, replicas=tracked.replicas))
                return
        pods = link.pods(row.namespace, tracked.label)
        kwargs = {"phase_of": phase_of, "replica_of": replica_of, "pull_grace": self.timing.pull_grace}
        seen = observe(primary, pods, events=tracked.events, **kwargs)
        if seen.phase == Phase.PENDING and not seen.reason and self._read_events(link, tracked, pods):
            seen = observe(primary, pods, events=tracked.events, **kwargs)
        self._follow(link, tracked, pods)
        if seen.fatal:
            enqueue(tasks.kube_delete, row.uid)
            self._end(tracked, Observed(Phase.FAILED, seen.reason, replicas=seen.replicas))
        elif seen.phase.finished:
            # The pods' watch may lag the primary's: the end is judged on the pods as they are now.
            selector = f"{LABEL_UID}={tracked.label}"
            pods = link.client.list(POD, row.namespace, label_selector=selector)[0]
            seen = observe(primary, pods, phase_of=phase_of, replica_of=replica_of, events=tracked.events)
            self._follow(link, tracked, pods)
            if tracked.state == KubeWorkload.State.PENDING and any(container_started(pod) for pod in pods):
                # It ran between two looks: the listener hears of the start before the end, as it would locally.
                self._started(row, tracked, seen)
            waited = (tracked.reason or tracked.waited) if tracked.state == KubeWorkload.State.PENDING else ""
            if seen.phase == Phase.FAILED and waited and waited not in seen.reason:
                # It failed without ever running (its deadline passed while it waited): why it waited is why it
                # failed, and what the diagnosis of its task reads (Unschedulable, a pull that never succeeded).
                seen.reason = f"{seen.reason} — while pending: {waited}" if seen.reason else waited
            self._end(tracked, seen)
        elif seen.phase == Phase.RUNNING and tracked.state == KubeWorkload.State.PENDING:
            self._started(row, tracked, seen)
        elif seen.reason != tracked.reason or seen.replicas != tracked.replicas:
            KubeWorkload.objects.filter(pk=row.pk, state__in=ACTIVE).update(reason=seen.reason, replicas=seen.replicas)
            tracked.reason, tracked.replicas = seen.reason, seen.replicas
            if seen.reason:
                # Kept for the end: the pods' watch can run ahead of the primary's, so the last pass before a Job
                # that failed while pending is seen failed may find its pods gone and no reason at all.
                tracked.waited = seen.reason

    def _started(self, row: KubeWorkload, tracked: Tracked, seen: Observed) -> None:
        started = KubeWorkload.objects.filter(pk=row.pk, state=KubeWorkload.State.PENDING).update(
            state=KubeWorkload.State.RUNNING, started_at=timezone.now(), reason="", replicas=seen.replicas
        )
        tracked.state, tracked.reason, tracked.replicas = KubeWorkload.State.RUNNING, "", seen.replicas
        if started:
            # The start carries the image the pods were started from (what the task really ran).
            status = Status(Phase.RUNNING, replicas=seen.replicas, image_digest=seen.image_digest)
            self.notices.put(("changed", (tracked, Phase.RUNNING, status)))

    def _read_events(self, link: Link, tracked: Tracked, pods: list[dict]) -> bool:
        """Events of pods still pending whose status does not say why (the scheduler's and kubelet's account),
        each pod's every few seconds. Whether any were read."""
        now = time.monotonic()
        read = False
        for pod in pods:
            name = pod["metadata"]["name"]
            if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
                tracked.events.pop(name, None)
                continue
            if now - tracked.events_at.get(name, -1e9) < self.timing.events:
                continue
            tracked.events_at[name] = now
            selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
            tracked.events[name] = link.client.list(EVENT, tracked.namespace, field_selector=selector)[0]
            read = True
        return read

    def _follow(self, link: Link, tracked: Tracked, pods: list[dict]) -> None:
        """A follower for every pod whose container has started (its log exists)."""
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in tracked.followers or not container_started(pod):
                continue
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            tracked.followers[name] = LogFollower(
                link.client,
                tracked.namespace,
                name,
                replica=replica_of(pod),
                container=log_container(pod) or containers[0].get("name", ""),
                deliver=tracked.deliver,
                cursor=tracked.cursor_of(name),
                idle_timeout=self.timing.log_idle,
                on_done=self.wake,
            ).start()

    # --- ending --------------------------------------------------------------------------------------

    def _end(self, tracked: Tracked, final: Observed, *, drain: bool = True) -> None:
        """The workload ended on the cluster: record it once its logs are drained (at most log_drain s)."""
        tracked.final = final
        tracked.drain_until = time.monotonic() + (self.timing.log_drain if drain else 0)
        self._drain(tracked)

    def _drain(self, tracked: Tracked) -> None:
        if not tracked.drained() and time.monotonic() < tracked.drain_until:
            return
        tracked.stop_followers(wait=5)
        with self.closing_lock:
            self.closing.add(tracked.row_id)
        self.tracked.pop(tracked.row_id, None)
        self.notices.put(("finish", tracked))

    def _record_end(self, tracked: Tracked) -> None:
        """On the notifier thread: close the sink (the last lines are stored), then record and tell."""
        final = tracked.final
        assert final is not None
        try:
            tracked.close_sink()
            ended = KubeWorkload.objects.filter(pk=tracked.row_id, state__in=ACTIVE).update(
                state=final.phase.value,
                reason=final.reason[:2000],
                exit_code=final.exit_code,
                replicas=final.replicas,
                log_cursors=tracked.current_cursors(),
                finished_at=timezone.now(),
            )
            if ended:
                status = Status(
                    final.phase,
                    exit_code=final.exit_code,
                    reason=final.reason,
                    replicas=final.replicas,
                    image_digest=final.image_digest,
                )
                self._tell(tracked, final.phase, status)
        finally:
            with self.closing_lock:
                self.closing.discard(tracked.row_id)

    def _tell(self, tracked: Tracked, phase: Phase, status: Status | None) -> None:
        listener = hooks.listener_for(tracked.workload)
        if listener is None:
            return
        try:
            listener.changed(tracked.workload, phase, status)
        except Exception:
            log.exception("notifying about %s failed", tracked.uid)

    def _deliver_notices(self) -> None:
        """Listeners hear of changes on one thread, in order: a start can never overtake the end."""
        try:
            while (notice := self.notices.get()) is not None:
                kind, payload = notice
                try:
                    if kind == "finish":
                        self._record_end(payload)
                    else:
                        self._tell(*payload)
                except DatabaseError:
                    log.exception("recording a change failed")
                    connection.close()
        finally:
            connection.close()

    # --- upkeep --------------------------------------------------------------------------------------

    def _save_cursors(self) -> None:
        for tracked in self.tracked.values():
            cursors = tracked.current_cursors()
            if cursors != tracked.saved_cursors:
                KubeWorkload.objects.filter(pk=tracked.row_id).update(log_cursors=cursors)
                tracked.saved_cursors = cursors

    def _prune_watchers(self) -> None:
        needed: dict[int, set] = {pk: set() for pk in self.links}
        for tracked in self.tracked.values():
            if tracked.primary is not None and tracked.cluster_id in needed:
                needed[tracked.cluster_id] |= {(tracked.namespace, tracked.primary), (tracked.namespace, POD)}
        for pk, link in self.links.items():
            link.keep_only(needed[pk])

    def _release(self, *, save: bool) -> None:
        """Let go of all work (another controller leads now, or this one stops): followers stop, and with
        `save` their cursors are saved and the sinks closed, so that every line read is stored and the next
        controller resumes after it. The workloads go on running on their clusters."""
        for tracked in self.tracked.values():
            tracked.stop_followers(wait=5)
        for link in self.links.values():
            link.stop()
        self.links.clear()
        if save:
            try:
                self._save_cursors()
            except DatabaseError:
                log.exception("saving log cursors failed")
            for tracked in self.tracked.values():
                tracked.close_sink()
        self.tracked.clear()

    def shutdown(self) -> None:
        """Stop cleanly (SIGTERM, SIGINT): release the work, deliver the pending notices, say goodbye."""
        self.stopping.set()
        self._release(save=True)
        self.notices.put(None)
        self._threads[0].join(timeout=30)
        Agent.objects.filter(pk=self.agent.pk).update(stopped_at=timezone.now())
        self.sock.close()
        connection.close()

    def crash(self) -> None:
        """For tests: make the loop stop as `kill -9` would after its current pass — no cursor saved, no sink
        closed, no goodbye — except that nothing this controller started keeps running in the test's process."""
        self.crashed = True
        self.stopping.set()
        self.wake()

    def _die(self) -> None:
        self._release(save=False)
        self.notices.put(None)
        self.sock.close()
