"""What the runtime calls back for workloads of pipeline tasks (label `task_run`): output and state changes."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone

from apps.jobs.models import LogLine, ResourceSample, TaskRun, TaskStatus
from apps.runtime.workload import Phase, Workload


class TaskSink:
    """Stores a task attempt's lines (through the log writer) and resource samples."""

    def __init__(self, task: TaskRun) -> None:
        from apps.jobs.logs import LogWriter

        self.task = task
        self.writer = LogWriter(task)
        self.samples: list[ResourceSample] = []

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        self.writer.write_many(replica, stream, texts)

    def sample(self, cpu_percent: float, rss_bytes: int) -> None:
        self.samples.append(
            ResourceSample(task=self.task, ts=timezone.now(), cpu_percent=round(cpu_percent, 1), rss_bytes=rss_bytes)
        )
        if len(self.samples) >= 10:
            self._flush_samples()

    def flush_if_due(self) -> None:
        self.writer.flush_if_due()

    def close(self) -> None:
        self.writer.close()
        self._flush_samples()

    def _flush_samples(self) -> None:
        if self.samples:
            ResourceSample.objects.bulk_create(self.samples)
            self.samples = []


class TaskListener:
    def sink(self, workload: Workload) -> TaskSink:
        labels = workload.labels
        if "node" in labels:  # all the log writer needs travels with the workload
            task_id, run_id = int(labels["task_run"]), int(labels["run"])
            task = TaskRun(pk=task_id, run_id=run_id, node=labels["node"], attempt=int(labels["attempt"]))
        else:  # submitted by an older portal
            task = TaskRun.objects.only("id", "run_id", "node", "attempt").get(pk=int(labels["task_run"]))
        return TaskSink(task)

    def changed(self, workload: Workload, phase: Phase) -> None:
        from apps.jobs.tasks import advance_run

        run_id = int(workload.labels["run"])
        if phase == Phase.RUNNING:
            # Starting changes nothing the orchestrator decides on: record it here and tell the run page,
            # instead of a full advance that would hold the run's lock while the next event arrives.
            task_id = int(workload.labels["task_run"])
            started = TaskRun.objects.filter(pk=task_id, status=TaskStatus.QUEUED)
            if started.update(status=TaskStatus.RUNNING, started_at=timezone.now()):
                _publish_started(run_id, task_id, workload.labels)
            return
        advance_run.delay(run_id)

    def logs(self, workload_uid: str, since: int) -> Iterator[tuple[str, int, str, str, str]]:
        task_id = int(workload_uid.rsplit("-", 1)[-1])
        lines = LogLine.objects.filter(task_id=task_id, seq__gt=since).order_by("seq")
        for line in lines.iterator(chunk_size=2000):
            yield line.replica, line.seq, line.ts.isoformat(), line.stream, line.text


def _publish_started(run_id: int, task_id: int, labels: dict[str, str]) -> None:
    """One node's change for the run page (progress and run status are unchanged by a start)."""
    from apps.jobs.orchestrator import publish_payload
    from apps.jobs.runstate import node_status

    if "node" in labels:
        node, attempt = labels["node"], int(labels.get("attempt", 1))
    else:  # submitted by an older portal: look it up
        node, attempt = TaskRun.objects.values_list("node", "attempt").get(pk=task_id)
    state = node_status(TaskRun(node=node, attempt=attempt, status=TaskStatus.RUNNING))
    publish_payload(run_id, {"type": "run.status", "run": run_id, "nodes": {node: state}})
