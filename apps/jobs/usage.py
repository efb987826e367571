"""A run's resource usage over time, for the chart of its page: per task attempt, CPU % and resident memory from the
`ResourceSample` rows the agent writes (about one a second, stored ten at a time).

A task that ran for a day has ~86,000 samples: each series is cut down on the server with Largest-Triangle-Three-
Buckets (the metric charts' downsampling, apps/models/lttb.py) to `points`, so the browser draws a few hundred
points per task whatever the run's length. The samples are read as raw columns, not model instances.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from apps.jobs.models import PipelineRun, ResourceSample, TaskRun
from portal.lib.lttb import lttb

DEFAULT_POINTS = 300
MIN_POINTS = 3
MAX_POINTS = 2000


def _series(t: np.ndarray, values: np.ndarray, points: int) -> dict[str, list[float]]:
    st, sv = lttb(t, values, points)
    return {"t": [int(x) for x in st], "v": sv.tolist()}


def usage_series(run: PipelineRun, points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """`{"run", "status", "active", "points", "tasks": [{"task", "node", "attempt", "status", "total", "cpu": {"t",
    "v"}, "rss": {"t", "v"}}]}`: times in ms since the epoch, CPU in % of one core, memory in bytes. Tasks without
    samples are left out; `active` says whether more samples may come (the run has not finished)."""
    rows = (
        ResourceSample.objects.filter(task__run=run)
        .order_by("task_id", "ts", "id")
        .values_list("task_id", "ts", "cpu_percent", "rss_bytes")
    )
    by_task: dict[int, list[tuple[float, float, float]]] = {}
    for task_id, ts, cpu, rss in rows.iterator(chunk_size=5000):
        by_task.setdefault(task_id, []).append((ts.timestamp() * 1000.0, cpu, float(rss)))
    tasks = TaskRun.objects.filter(pk__in=by_task).only("id", "node", "attempt", "status").order_by("node", "attempt")
    series = []
    for task in tasks:
        data = np.array(by_task[task.pk], dtype=np.float64)
        series.append(
            {
                "task": task.pk,
                "node": task.node,
                "attempt": task.attempt,
                "status": task.status,
                "total": len(data),
                "cpu": _series(data[:, 0], data[:, 1], points),
                "rss": _series(data[:, 0], data[:, 2], points),
            }
        )
    return {"run": run.pk, "status": run.status, "active": not run.is_finished, "points": points, "tasks": series}
