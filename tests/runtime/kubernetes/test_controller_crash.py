"""A controller killed at any point and restarted leaves no workload stuck: what it watched is watched again, logs
resume where they stopped, what vanished is LOST, what was never created is created (by the tasks: a worker killed
mid-apply is test_worker_killed_mid_apply.py). One controller leads at a time; `manage.py runkube` stops cleanly on
SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from apps.runtime.kubernetes.runtime import live_controllers
from apps.runtime.models import Agent, KubeWorkload
from apps.runtime.workload import Phase
from tests.conftest import database_url_of_test_db
from tests.runtime.kubernetes.conftest import fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_job


def workload_labels(fake, group: str, plural: str) -> list[str]:
    return [o["metadata"]["labels"].get("portal.io/workload") for o in fake.objects(group, plural, "team-a")]


class RunKube:
    """`manage.py runkube` as a real process against the test database and the fake API server."""

    def __init__(self, log: Path) -> None:
        self.log = log
        env = {
            **os.environ,
            "DATABASE_URL": database_url_of_test_db(),
            "PORTAL_VAR_DIR": str(settings.VAR_DIR),
            "SECRET_KEY": settings.SECRET_KEY,
            "PORTAL_KUBE_TICK": "0.05",
            "PORTAL_KUBE_HEARTBEAT": "0.2",
            "PORTAL_KUBE_LOG_DRAIN": "5",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runkube"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not live_controllers().filter(pid=self.proc.pid).exists():
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "runkube did not start"
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        self.proc.terminate()
        return self.proc.wait(30)


@pytest.fixture
def quick_death(settings):
    """A killed controller's heartbeat goes stale after a second (then another one takes over)."""
    settings.PORTAL_AGENT_TIMEOUT = 1


def test_a_killed_controllers_running_workloads_finish_under_the_next_one(
    fake, cluster, listener, run_controller, kube_worker, tmp_path, quick_death
):
    kube_worker.start()  # creates the objects; runkube watches them
    runkube = RunKube(tmp_path / "runkube.log")
    runtime = fresh_runtime()
    runtime.submit_many([mine(sample_job(), "task-1"), mine(sample_job(), "task-2")])
    names = fake.sim.wait_created(2, timeout=30)
    for name in names:
        fake.sim.start(name)
    wait_for(lambda: row_state("task-1") == row_state("task-2") == "running", timeout=30)
    runkube.kill()

    successor = run_controller()
    wait_for(lambda: successor.controller.leading, timeout=10, message="the new controller never took over")
    for name in names:
        fake.sim.succeed(name)
    wait_for(lambda: row_state("task-1") == row_state("task-2") == "succeeded", timeout=30)
    assert sorted(workload_labels(fake, "batch", "jobs")) == ["task-1", "task-2"]
    # Running was told by the killed controller's process; the end by its successor, in this one.
    listener.wait_phases("task-1", [Phase.SUCCEEDED])


def test_objects_gone_while_no_controller_ran_end_lost_and_unapplied_intent_is_created(
    fake, cluster, listener, run_controller
):
    first = run_controller()
    runtime = fresh_runtime()
    runtime.submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-1") == "running")
    first.stop()

    fake.store.delete(("batch", "jobs"), "team-a", name, "Foreground")  # someone cleaned up meanwhile
    runtime.submit(mine(sample_job(), "task-2"))
    # A controller recorded its intent for task-2 and died before creating anything.
    KubeWorkload.objects.filter(uid="task-2").update(
        applied=[{"apiVersion": "batch/v1", "kind": "Job", "name": "task-2"}]
    )
    run_controller()
    wait_for(lambda: row_state("task-1") == "lost", message="task-1 stuck running")
    wait_for(lambda: KubeWorkload.objects.get(uid="task-2").created, message="task-2 never created")
    assert workload_labels(fake, "batch", "jobs") == ["task-2"]


def test_only_the_oldest_live_controller_works(fake, cluster, listener, run_controller):
    leader = run_controller()
    standby = run_controller()
    wait_for(lambda: leader.controller.leading)
    time.sleep(0.5)
    assert not standby.controller.leading
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-1") == "running")
    leader.stop()  # a clean stop: the standby takes over at once
    wait_for(lambda: standby.controller.leading, message="the standby never took over")
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-1") == "succeeded")
    assert len(fake.objects("batch", "jobs", "team-a")) == 1


def test_runkube_stops_cleanly_on_sigterm(fake, cluster, tmp_path):
    runkube = RunKube(tmp_path / "runkube.log")
    assert runkube.terminate() == 0
    agent = Agent.objects.get(pid=runkube.proc.pid)
    assert agent.stopped_at is not None
    assert "ready on 127.0.0.1:" in (tmp_path / "runkube.log").read_text()


def test_after_a_crash_logs_resume_from_the_last_saved_cursor(fake, cluster, listener, run_controller, quick_death):
    first = run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    (pod,) = fake.sim.pod_names(name)
    fake.sim.start(name)
    fake.sim.log(name, pod, [f"before {i}" for i in range(10)])
    wait_for(lambda: sum(map(len, listener.lines["task-1"].values())) == 10)
    # The cursor is saved at every pass; once it covers the ten lines, the controller dies without a goodbye.
    last_line_ns = fake.store.logs[("team-a", pod)][-1][0]
    wait_for(lambda: KubeWorkload.objects.get(uid="task-1").log_cursors.get(pod) == [last_line_ns, 1])
    first.crash()
    assert listener.closed == []

    fake.sim.log(name, pod, [f"after {i}" for i in range(5)])
    successor = run_controller()
    wait_for(lambda: successor.controller.leading, timeout=10)
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-1") == "succeeded")
    (lines,) = listener.lines["task-1"].values()
    assert lines == [*(f"before {i}" for i in range(10)), *(f"after {i}" for i in range(5))]
