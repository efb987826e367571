"""What a real local agent measures and enforces of a task's resources: live CPU % samples, the CPU time of a
task it had to kill, and the memory limit (a task over it fails as OOMKilled, as on Kubernetes)."""

from __future__ import annotations

import pytest

from apps.jobs.services import start_run
from tests.factories import pipeline
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live]

BURN = "while True: pass"
MiB = 2**20


def test_a_busy_task_samples_a_non_zero_cpu_and_is_billed_its_cpu_when_killed(agent, project, owner):
    run = drive(start_run(pipeline(project, owner, [{"name": "burn", "timeout": 3, "args": {"code": BURN}}]), owner))
    task = run.tasks.get()
    assert (task.status, task.reason) == ("failed", "timeout: still running after 3 s")
    percents = list(task.samples.values_list("cpu_percent", flat=True))
    assert percents
    assert max(percents) > 10, percents
    # Killed at its timeout: billed the CPU it burned, not 0.
    assert task.usage["cpu_seconds"] >= 0.5, task.usage
    assert task.usage["peak_rss_bytes"] > 0


def test_a_task_over_its_memory_limit_is_killed_as_oomkilled(agent, project, owner):
    hog = "import time\nblock = b'x' * (400 * 2**20)\ntime.sleep(60)\n"
    nodes = [{"name": "hog", "resources": {"memory": "128Mi"}, "args": {"code": hog}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))
    task = run.tasks.get()
    assert task.status == "failed"
    assert task.exit_code == 137
    assert task.reason.startswith("OOMKilled: the task used "), task.reason
    assert "over its memory limit of 128 MiB" in task.reason
    assert task.usage["peak_rss_bytes"] > 128 * MiB
    assert run.status == "failed"


def test_a_burst_over_the_limit_fails_even_when_the_task_ends_first(agent, project, owner):
    burst = "block = b'x' * (400 * 2**20)\ndel block\n"
    nodes = [{"name": "burst", "resources": {"memory": "128Mi"}, "args": {"code": burst}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))
    task = run.tasks.get()
    assert task.status == "failed"
    assert task.reason.startswith("OOMKilled: the task used "), task.reason
    assert task.usage["peak_rss_bytes"] > 128 * MiB  # where it was stopped, or its peak by wait4


def test_a_task_within_its_memory_limit_succeeds_with_its_peak_recorded(agent, project, owner):
    # Held for a moment: a task shorter than the watchdog's look has no peak of its own to report (wait4's peak
    # includes the agent's, apps/runtime/local/processes.py), so it would read 0.
    fits = "import time\nblock = b'x' * (64 * 2**20)\ntime.sleep(1.5)\n"
    nodes = [{"name": "fits", "resources": {"memory": "512Mi"}, "args": {"code": fits}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))
    task = run.tasks.get()
    assert task.status == "succeeded", task.reason
    assert 64 * MiB < task.usage["peak_rss_bytes"] < 512 * MiB
