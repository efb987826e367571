"""The acceptance of true resource monitoring: what the local agent stores of a real task — a busy loop, a 400 MiB
allocation — reads what `psutil` reads of the same process tree (the replica's pid, from its workload row), sampled
by this test while the task runs, within ±10 %. No mocks: a real agent, real processes, real samples."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

import psutil
import pytest

from apps.jobs.models import PipelineRun, TaskRun
from apps.jobs.services import start_run
from apps.jobs.usage import usage_series
from apps.runtime.models import LocalWorkload
from tests.factories import pipeline, python_template
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live]

MiB = 2**20
BUSY = "import time\nend = time.monotonic() + 9\nwhile time.monotonic() < end:\n    pass\n"
ALLOCATE = "import time\nblock = b'x' * (400 * 2**20)\ntime.sleep(9)\n"


def running_pid(run: PipelineRun) -> tuple[TaskRun, int]:
    """The task and its replica's pid once the agent has started it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        drive(run, until=lambda r: r.tasks.filter(status="running").exists())
        task = run.tasks.get()
        row = LocalWorkload.objects.filter(uid=task.handle).first() if task.handle else None
        if row is not None and row.pids:
            return task, int(row.pids["0"])
        time.sleep(0.1)
    raise AssertionError("the task did not start")


def watch(pid: int, seconds: float) -> list[tuple[datetime, float, int]]:
    """(when, CPU %, RSS bytes) of the pid's process tree once a second, as psutil reads it: each process's
    `cpu_percent` from the same `Process` object call after call (so it measures the time since the last call)."""
    root = psutil.Process(pid)
    procs: dict[int, psutil.Process] = {}
    readings = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cpu, rss = 0.0, 0
        for proc in [root, *root.children(recursive=True)]:
            proc = procs.setdefault(proc.pid, proc)
            try:
                cpu += proc.cpu_percent(interval=None)
                rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        readings.append((datetime.now(UTC), cpu, rss))
        time.sleep(1.0)
    return readings[1:]  # the first call of cpu_percent primes it (0.0)


def stored_within(task: TaskRun, start: datetime, end: datetime) -> list[tuple[float, int]]:
    rows = task.samples.filter(ts__gte=start, ts__lte=end).order_by("ts").values_list("cpu_percent", "rss_bytes")
    return list(rows)


def run_and_watch(project, owner, code: str) -> tuple[TaskRun, list, list]:
    run = start_run(pipeline(project, owner, [{"name": "probe", "timeout": 60, "args": {"code": code}}]), owner)
    task, pid = running_pid(run)
    time.sleep(1.5)  # past the start-up of the interpreter
    readings = watch(pid, 6)
    run = drive(run)
    task.refresh_from_db()
    assert task.status == "succeeded", task.reason
    stored = stored_within(task, readings[0][0], readings[-1][0])
    assert len(stored) >= 3, (stored, readings)
    assert set(task.samples.values_list("replica", flat=True)) == {"0"}
    return task, readings, stored


def test_a_busy_loops_stored_cpu_reads_what_psutil_reads_of_it(agent, project, owner):
    _task, readings, stored = run_and_watch(project, owner, BUSY)
    ours = statistics.mean(cpu for cpu, _rss in stored)
    theirs = statistics.mean(cpu for _ts, cpu, _rss in readings)
    # It was busy: a shared 2-core machine may give it a quarter of a core, never nothing.
    assert theirs > 5, readings
    assert abs(ours - theirs) <= 0.10 * theirs, (ours, theirs, stored, readings)


def test_a_400_mib_allocations_stored_memory_reads_what_psutil_reads_of_it(agent, project, owner):
    task, readings, stored = run_and_watch(project, owner, ALLOCATE)
    ours = statistics.median(rss for _cpu, rss in stored)
    theirs = statistics.median(rss for _ts, _cpu, rss in readings)
    assert 400 * MiB < theirs < 520 * MiB, theirs
    assert abs(ours - theirs) <= 0.10 * theirs, (ours / MiB, theirs / MiB)
    assert all(gpu is None for gpu in task.samples.values_list("gpu_percent", flat=True))  # no GPU here: nulls


def test_each_replica_of_a_distributed_task_has_its_own_series(agent, project, owner):
    python_template(slug="pyd", kind="distributed", framework="pytorch", replicas={"master": 1, "worker": 1})
    # The master burns, the worker sleeps: merged, the two would be one line at ~50 %.
    code = (
        "import os, time\nend = time.monotonic() + 4\n"
        "while time.monotonic() < end:\n    if os.environ['RANK'] == '0':\n        continue\n    time.sleep(0.05)\n"
    )
    nodes = [{"name": "ddp", "template": "pyd", "timeout": 60, "args": {"code": code}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))
    task = run.tasks.get()
    assert task.status == "succeeded", task.reason
    series = {s["replica"]: s for s in usage_series(run)["tasks"]}
    assert set(series) == {"master-0", "worker-0"}
    master, worker = (statistics.mean(series[r]["cpu"]["v"]) for r in ("master-0", "worker-0"))
    # The master burns (a shared machine gives it what it can), the worker hardly runs: two lines, not one.
    assert master > max(3 * worker, 5), (series["master-0"]["cpu"], series["worker-0"]["cpu"])
    assert all(s["rss"]["v"] and min(s["rss"]["v"]) > 0 for s in series.values())
