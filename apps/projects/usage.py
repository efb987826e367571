"""What a project's long-lived sessions hold of its quota: running notebooks and inference-service replicas.

Pipeline tasks come and go through the queue (apps/jobs/dispatcher.py), which counts them itself; notebooks and
model servers hold their CPU, memory and GPUs for as long as they run, so every quota decision adds them: the
queue (a task waits while a notebook holds the project's GPUs), a notebook's start (apps/notebooks/capacity.py) and
a service's scale-up (apps/serving/autoscale.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

Usage = tuple[float, float, float]  # CPU cores, memory bytes, GPUs


def held(project_ids: Iterable[int], *, except_notebook: int | None = None) -> dict[int, Usage]:
    """CPU cores, memory bytes and GPUs held by the running notebooks and live serving replicas of each project
    (projects holding nothing are absent). `except_notebook`: leave that one out (the one being started)."""
    from apps.notebooks.models import Notebook
    from apps.serving.models import Replica

    ids = set(project_ids)
    if not ids:
        return {}
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    notebooks = Notebook.objects.filter(project_id__in=ids, status__in=Notebook.ACTIVE)
    if except_notebook is not None:
        notebooks = notebooks.exclude(pk=except_notebook)
    for project_id, cpu, memory, gpu in notebooks.values_list("project_id", "cpu", "memory_bytes", "gpu"):
        total = totals[project_id]
        total[0] += float(cpu or 0)
        total[1] += float(memory or 0)
        total[2] += float(gpu or 0)
    replicas = Replica.objects.filter(
        revision__service__project_id__in=ids, status__in=(Replica.Status.STARTING, Replica.Status.READY)
    ).values_list("revision__service__project_id", "revision__config")
    for project_id, config in replicas:
        resources = (config or {}).get("resources") or {}
        total = totals[project_id]
        total[0] += float(resources.get("cpu") or 0)
        total[1] += float(resources.get("memory_bytes") or 0)
        total[2] += float(resources.get("gpu") or 0)
    return {project_id: (t[0], t[1], t[2]) for project_id, t in totals.items()}


def limits_of(project) -> tuple[float | None, float | None, float | None]:
    """The project's quota limits of CPU cores, memory bytes and GPUs (None: no limit)."""
    quota = getattr(project, "quota", None)
    if quota is None:
        return (None, None, None)
    return tuple(None if v is None else float(v) for v in (quota.cpu_cores, quota.memory_bytes, quota.gpus))


def in_use(project, *, except_notebook: int | None = None) -> Usage:
    """What the project's active tasks, notebooks and model servers hold of CPU cores, memory bytes and GPUs."""
    from apps.jobs.models import TASK_ACTIVE, TaskRun

    used = list(held([project.pk], except_notebook=except_notebook).get(project.pk, (0.0, 0.0, 0.0)))
    for (resources,) in TaskRun.objects.filter(run__project=project, status__in=TASK_ACTIVE).values_list("resources"):
        res = resources or {}
        used[0] += float(res.get("cpu") or 0)
        used[1] += float(res.get("memory") or 0)
        used[2] += float(res.get("gpu") or 0)
    return (used[0], used[1], used[2])


def free_quota(project) -> tuple[float | None, float | None, float | None]:
    """What the project's quota leaves of CPU cores, memory bytes and GPUs after its active tasks, notebooks and
    model servers (None: that resource has no limit)."""
    limits = limits_of(project)
    if all(limit is None for limit in limits):
        return (None, None, None)
    used = in_use(project)
    free = [None if limit is None else max(limit - u, 0.0) for limit, u in zip(limits, used, strict=True)]
    return (free[0], free[1], free[2])


def fits(need: Usage, free: tuple[float | None, float | None, float | None]) -> int:
    """How many more of something needing `need` the `free` quota takes (a large number when nothing limits)."""
    counts = [int(f // n + 1e-9) for n, f in zip(need, free, strict=True) if f is not None and n > 0]
    return min(counts) if counts else 1_000_000
