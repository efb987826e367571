"""What a project's long-lived sessions hold of its quota: running notebooks and inference-service replicas.

Pipeline tasks come and go through the queue (apps/jobs/dispatcher.py), which counts them itself; notebooks and
model servers hold their CPU, memory and GPUs for as long as they run, so every quota decision adds them: the
queue (a task waits while a notebook holds the project's GPUs), a notebook's start (apps/notebooks/capacity.py) and
a service's scale-up (apps/serving/autoscale.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from portal.lib.resources import Resources


def held(project_ids: Iterable[int], *, except_notebook: int | None = None) -> dict[int, Resources]:
    """What the running notebooks and live serving replicas of each project hold (projects holding nothing are
    absent). `except_notebook`: leave that one out (the one being started)."""
    from apps.notebooks.models import Notebook
    from apps.serving.models import Replica

    ids = set(project_ids)
    if not ids:
        return {}
    totals: dict[int, Resources] = defaultdict(Resources.none)
    notebooks = Notebook.objects.filter(project_id__in=ids, status__in=Notebook.ACTIVE)
    if except_notebook is not None:
        notebooks = notebooks.exclude(pk=except_notebook)
    for project_id, cpu, memory, gpu in notebooks.values_list("project_id", "cpu", "memory_bytes", "gpu"):
        totals[project_id] += Resources.of(cpu, memory, gpu)
    replicas = Replica.objects.filter(
        revision__service__project_id__in=ids, status__in=(Replica.Status.STARTING, Replica.Status.READY)
    ).values_list("revision__service__project_id", "revision__config")
    for project_id, config in replicas:
        totals[project_id] += Resources.from_json((config or {}).get("resources"))
    return dict(totals)


def in_use(project, *, except_notebook: int | None = None) -> Resources:
    """What the project's active tasks, notebooks and model servers hold."""
    from apps.jobs.models import TASK_ACTIVE, TaskRun

    used = held([project.pk], except_notebook=except_notebook).get(project.pk, Resources.none())
    for (resources,) in TaskRun.objects.filter(run__project=project, status__in=TASK_ACTIVE).values_list("resources"):
        used += Resources.from_json(resources)
    return used
