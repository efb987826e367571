"""What the runtime calls back for workloads of pipeline tasks (label `task_run`): output and state changes."""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import TASK_ACTIVE, Image, ResourceSample, TaskRun, TaskStatus
from apps.jobs.usage_warnings import UsageWatch
from apps.runtime import hooks
from apps.runtime.hooks import RegistryCredentials
from apps.runtime.models import progress_marker
from apps.runtime.secretenv import Secrets
from apps.runtime.usage import TASK, Holder, label_ids
from apps.runtime.workload import Phase, Status, Workload, demand
from portal.lib.resources import Resources

logger = logging.getLogger(__name__)


class TaskSink:
    """Stores a task attempt's lines (through the log writer) and resource samples.

    Lines are stored by a thread of the sink's own, so the agent goes on reading the task's pipes while the
    database takes a batch: reading and storing overlap instead of taking turns. The queue between them is
    bounded: when storing falls behind, the reader waits, and so, through its full pipe, does the task.
    """

    # Chunks waiting to be stored (up to a full pipe, 64 KiB, each): one keeps the database busy while the
    # next chunk is read; each more adds a chunk's worth of latency when a task prints faster than we store.
    QUEUED_CHUNKS = 1
    RETRY_SECONDS = 1.0
    CLOSE_ATTEMPTS = 10  # then the task's end is recorded anyway: a database that is down loses the last lines

    def __init__(
        self, task: TaskRun, secrets: list[str] | None = None, memory_limit: int = 0, replicas: int = 1
    ) -> None:
        from apps.jobs.logindex import shared_indexer
        from apps.jobs.logs import LogWriter

        self.task = task
        # Secret values are masked in every stored line; PostgreSQL indexes the lines once they are live.
        self.writer = LogWriter(task, secrets or (), indexer=shared_indexer())
        self.samples: list[ResourceSample] = []
        self.watch = UsageWatch(memory_limit)
        self.warnings: list[dict[str, str]] = []
        self.replicas = max(replicas, 1)  # samples are stored ten ticks at a time, whatever the replicas
        self._chunks: queue.Queue[tuple[str, str, list[str], datetime] | None] = queue.Queue(self.QUEUED_CHUNKS)
        # Started with the first line: a task that prints nothing (many a pipeline step) costs no thread.
        self._storer: threading.Thread | None = None
        self._starting = threading.Lock()

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        if self._storer is None:
            with self._starting:
                if self._storer is None:
                    self._storer = threading.Thread(target=self._store, name=f"logs-{self.task.pk}", daemon=True)
                    self._storer.start()
        self._chunks.put((replica, stream, texts, timezone.now()))  # stamped when read, not when stored

    def _store(self) -> None:
        try:
            while True:
                try:
                    chunk = self._chunks.get(timeout=self.writer.max_delay)
                except queue.Empty:
                    self._attempt(self.writer.flush_if_due)  # also retries a batch that failed
                    continue
                if chunk is None:
                    break
                replica, stream, texts, ts = chunk
                self._attempt(functools.partial(self.writer.write_many, replica, stream, texts, ts=ts))
            for _ in range(self.CLOSE_ATTEMPTS):
                if self._attempt(self.writer.close):
                    break
            else:
                logger.error("gave up storing the last %d log lines of task %s", self.writer.pending, self.task.pk)
        finally:
            connection.close()  # this thread's own

    def _attempt(self, store) -> bool:
        """Lines that could not be stored stay pending in the writer, for the next attempt."""
        try:
            store()
            return True
        except DatabaseError:
            logger.exception("storing log lines of task %s failed; will retry", self.task.pk)
            connection.close()
            time.sleep(self.RETRY_SECONDS)
            return False

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None:
        """One replica's sample; a warning it raises is stored at once (the run page shows it while it runs)."""
        ts = timezone.now()
        self.samples.append(
            ResourceSample(
                task=self.task,
                replica=replica,
                ts=ts,
                cpu_percent=round(cpu_percent, 1),
                rss_bytes=rss_bytes,
                gpu_percent=None if gpu_percent is None else round(gpu_percent, 1),
                gpu_memory_bytes=gpu_memory_bytes,
            )
        )
        raised = self.watch.observe(replica, ts, rss_bytes, gpu_percent)
        if raised:
            self.warnings += raised
            self._store_warnings()
        if len(self.samples) >= 10 * self.replicas:
            self._flush_samples()

    def _store_warnings(self) -> None:
        try:
            TaskRun.objects.filter(pk=self.task.pk).update(resource_warnings=self.warnings)
        except DatabaseError:  # a sample is not worth failing the task's supervision; the next warning retries
            logger.warning("could not store the resource warnings of task %s", self.task.pk, exc_info=True)
            connection.close()

    def close(self) -> None:
        """Store everything the task printed (the run sees its last lines before it sees it end)."""
        with self._starting:
            storer = self._storer
        if storer is not None:
            self._chunks.put(None)
            storer.join()
        else:
            self.writer.close()  # nothing was written: nothing to store
        self._flush_samples()

    def _flush_samples(self) -> None:
        if self.samples:
            ResourceSample.objects.bulk_create(self.samples)
            self.samples = []


class TaskListener(hooks.Listener):
    batches_with_ends = True  # an end and the advance it causes are one commit (changed_many)

    def sink(self, workload: Workload, secrets: Secrets) -> TaskSink:
        labels = workload.labels
        if "node" in labels:  # all the log writer needs travels with the workload
            task_id, run_id = int(labels["task_run"]), int(labels["run"])
            task = TaskRun(pk=task_id, run_id=run_id, node=labels["node"], attempt=int(labels["attempt"]))
        else:  # submitted by an older portal
            task = TaskRun.objects.only("id", "run_id", "node", "attempt").get(pk=int(labels["task_run"]))
        replicas = sum(int(n) for n in workload.replicas.values()) if workload.kind == "distributed" else 1
        sink = TaskSink(task, list(secrets.values), workload.resources.memory_bytes or 0, replicas)
        if secrets.missing:  # deleted between dispatch and start: the task runs without it and its log says why
            sink.write_many(
                "0", "stderr", [f"portal: secret {name} no longer exists; not set" for name in secrets.missing]
            )
        return sink

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        from apps.jobs.tasks import advance_run

        _record_image_digests([(workload, status)])
        if phase == Phase.RUNNING:
            # Starting changes nothing the orchestrator decides on: record it here and tell the run page,
            # instead of a full advance that would hold the run's lock while the next event arrives.
            _record_starts([workload])
            return
        # The runtime's record travels with the event, so the advance need not poll it again.
        reported = asdict(status) if status is not None else None
        advance_run.delay(int(workload.labels["run"]), int(workload.labels["task_run"]), reported)

    def changed_many(self, notices: list[tuple[Workload, Phase, Status | None]]) -> None:
        """Notices that queued up together, in order (the local agent hands them over in one go, inside the
        transaction that records their ends: apps/runtime/local/notifier.py, `batches_with_ends`). Here, not in a
        Celery worker: the ends of each run are applied and what became ready is dispatched by one advance in this
        process, which saves a broker round trip per task and, when a fan-out's leaves end together, an advance
        (and a commit) per leaf. A start whose end is among the notices is not recorded on its own: the end says
        when it started."""
        from apps.jobs.orchestrator import advance_reported
        from apps.jobs.tasks import advance_run

        _record_image_digests([(w, status) for w, _phase, status in notices])
        ended = {w.uid for w, phase, _status in notices if phase != Phase.RUNNING}
        starts = [w for w, phase, _status in notices if phase == Phase.RUNNING and w.uid not in ended]
        if starts:
            _record_starts(starts)
        reports: dict[int, dict[int, dict | None]] = defaultdict(dict)
        for workload, phase, status in notices:
            if phase != Phase.RUNNING:
                run_id, task_id = int(workload.labels["run"]), int(workload.labels["task_run"])
                reports[run_id][task_id] = asdict(status) if status is not None else None
        for run_id, by_task in reports.items():
            try:
                done = advance_reported(run_id, by_task)
            except Exception:  # a worker tries again (and the reconcile loop after it)
                logger.exception("advancing run %s failed; handing it to a worker", run_id)
                done = False
            if not done:  # another process holds the run: a worker applies the reports once it is free
                for task_id, reported in by_task.items():  # after the commit that records the ends
                    transaction.on_commit(functools.partial(advance_run.delay, run_id, task_id, reported))


ImageDigestHook = Callable[[int, str], None]
_image_digest_hooks: list[ImageDigestHook] = []


def on_image_digest(hook: ImageDigestHook) -> ImageDigestHook:
    """Register `hook(task_id, digest)`, called in the transaction that records the image digest a task's runtime
    reported (apps.models registers the tagging of the task's tracked runs)."""
    if hook not in _image_digest_hooks:
        _image_digest_hooks.append(hook)
    return hook


def _record_image_digests(reports: list[tuple[Workload, Status | None]]) -> None:
    """Record the image each task really ran, where its runtime reported one (Kubernetes does once the pod was
    started from it; the local runtime runs no image and reports none), and tag the tracked runs the task has
    already started with it (the hooks of `on_image_digest`: apps.models tags them; runs it starts later take it
    from the task).
    The task's row stays locked until its runs are tagged, so a run created meanwhile is not missed."""
    for workload, status in reports:
        digest = (status.image_digest if status is not None else "")[:500]
        if not digest:
            continue
        task_id = int(workload.labels["task_run"])
        with transaction.atomic():
            if TaskRun.objects.filter(pk=task_id).exclude(image_digest=digest).update(image_digest=digest):
                for hook in _image_digest_hooks:
                    hook(task_id, digest)


def _record_starts(workloads: list[Workload]) -> None:
    """Mark the tasks of `workloads` running (those still queued: a late notice never undoes an end) and tell
    their run pages. A progress marker: its commit need not wait for the disk (see `progress_marker`)."""
    ids = [int(w.labels["task_run"]) for w in workloads]
    now = timezone.now()
    with progress_marker():
        queued = TaskRun.objects.filter(pk__in=ids, status=TaskStatus.QUEUED)
        if len(ids) == 1:
            started = ids if queued.update(status=TaskStatus.RUNNING, started_at=now) else []
        else:
            started = list(queued.select_for_update(no_key=True).values_list("pk", flat=True))
            TaskRun.objects.filter(pk__in=started).update(status=TaskStatus.RUNNING, started_at=now)
    by_run: dict[int, list[Workload]] = defaultdict(list)
    for workload in workloads:
        if int(workload.labels["task_run"]) in started:
            by_run[int(workload.labels["run"])].append(workload)
    for run_id, group in by_run.items():
        transaction.on_commit(functools.partial(_publish_started, run_id, group))  # the caller's, when it has one


def _publish_started(run_id: int, workloads: list[Workload]) -> None:
    """The nodes that started, for the run page (progress and run status are unchanged by a start)."""
    from apps.jobs.orchestrator import publish_nodes

    nodes = {}
    for workload in workloads:
        labels = workload.labels
        if "node" in labels:
            node, attempt = labels["node"], int(labels.get("attempt", 1))
        else:  # submitted by an older portal: look it up
            node, attempt = TaskRun.objects.values_list("node", "attempt").get(pk=int(labels["task_run"]))
        nodes[node] = TaskRun(node=node, attempt=attempt, status=TaskStatus.RUNNING)
    publish_nodes(run_id, nodes)


def describe_holders(holders: list[Holder]) -> None:
    """The capacity page's words for a task's workload: its run and node, who started the run, the run's page."""
    rows = TaskRun.objects.filter(pk__in=label_ids(holders, "task_run"))
    tasks = {t.pk: t for t in rows.select_related("run__project", "run__created_by").defer("run__spec")}
    for holder in holders:
        if (task := tasks.get(int(holder.labels.get("task_run") or 0))) is None:
            continue
        run = task.run
        holder.kind = TASK
        holder.what = f"{run} · {task.node}"
        holder.user = run.created_by.username if run.created_by else ""
        holder.url = reverse("jobs:run-detail", kwargs={"project": run.project.slug, "pk": run.pk})
        holder.project_name = run.project.name


def registry_credentials(image_pk: str) -> RegistryCredentials | None:
    """The registry credentials of the Image a task's workload names (label `image`), read when a cluster applies
    it (apps/runtime/kubernetes/apply.py), so that a password changed since the dispatch is the one used."""
    image = Image.objects.filter(pk=image_pk).first() if str(image_pk).isdigit() else None
    if image is None:
        return None
    return RegistryCredentials(
        image=image.name,
        registry=image.registry,
        username=image.registry_username,
        password=image.registry_password,
    )


def quota_held(project_ids: set[int], except_pk: int | None) -> Iterator[tuple[int, Resources]]:
    """What queued and running tasks hold of their projects' quotas (apps/projects/usage.py; the queue counts
    them itself when it admits)."""
    tasks = TaskRun.objects.filter(run__project_id__in=project_ids, status__in=TASK_ACTIVE)
    if except_pk is not None:
        tasks = tasks.exclude(pk=except_pk)
    for project_id, resources, replicas in tasks.values_list("run__project_id", "resources", "replicas"):
        yield project_id, demand(Resources.from_json(resources), replicas)
