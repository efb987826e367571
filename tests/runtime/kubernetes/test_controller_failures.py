"""What goes wrong on a cluster ends in the right state with the reason people need: ImagePullBackOff (with the
image), Unschedulable (with the scheduler's message), OOMKilled, Evicted, an Event's account, objects that
vanished (LOST)."""

from __future__ import annotations

import dataclasses

from apps.jobs.diagnosis import Facts, diagnose
from apps.runtime.models import KubeWorkload
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.conftest import FAST, fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_distributed, sample_job

IMAGE = "registry.example.com/portal/tasks:1.4"
NO_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."


def reason(uid: str) -> str:
    return KubeWorkload.objects.values_list("reason", flat=True).get(uid=uid)


def test_an_image_that_cannot_be_pulled_is_reported_then_fails_the_run(fake, cluster, listener, run_controller):
    controller = run_controller(dataclasses.replace(FAST, pull_grace=3600))
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    fake.sim.image_pull_backoff(name)
    wait_for(lambda: "ImagePullBackOff" in reason("task-1"), message="no reason while pending")
    assert row_state("task-1") == "pending"
    assert f'Back-off pulling image "{IMAGE}"' in reason("task-1")

    controller.controller.timing = dataclasses.replace(controller.controller.timing, pull_grace=0)
    wait_for(lambda: row_state("task-1") == "failed", message="stuck pending")
    assert "ImagePullBackOff" in reason("task-1")
    assert IMAGE in reason("task-1")
    # Nothing is left pulling forever: the delete task the controller queued removes the Job and its pods.
    wait_for(lambda: fake.objects("batch", "jobs", "team-a") == [], message="the job was left behind")
    wait_for(lambda: fake.objects("", "pods", "team-a") == [], message="its pods were left behind")
    listener.wait_phases("task-1", [Phase.FAILED])


def test_an_unschedulable_pod_waits_with_the_schedulers_message(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-2"))
    (name,) = fake.sim.wait_created()
    fake.sim.unschedulable(name, NO_GPU)
    wait_for(lambda: "Unschedulable" in reason("task-2"))
    assert NO_GPU in reason("task-2")
    assert row_state("task-2") == "pending"
    fake.sim.start(name)  # a node freed up
    wait_for(lambda: row_state("task-2") == "running")
    assert reason("task-2") == ""


def test_a_job_that_fails_while_unschedulable_says_why_it_waited(fake, cluster, listener, run_controller):
    """Its deadline passed before any node could take it: the end carries the scheduler's message, which the task's
    failure diagnosis reads (docs/diagnosis.md)."""
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-7"))
    (name,) = fake.sim.wait_created()
    fake.sim.unschedulable(name, NO_GPU)
    wait_for(lambda: "Unschedulable" in reason("task-7"))
    fake.sim._set_primary_status(fake.sim.workloads[name], "failed")  # as the Job controller at its deadline
    wait_for(lambda: row_state("task-7") == "failed")
    status = fresh_runtime().poll("task-7")
    assert "while pending: " in status.reason
    assert NO_GPU in status.reason
    assert diagnose(Facts(status.exit_code, status.reason)).cause == "unschedulable"


def test_an_event_explains_a_pending_pod_whose_status_says_nothing(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-3"))
    (name,) = fake.sim.wait_created()
    (pod,) = fake.sim.pod_names(name)
    fake.sim.event("team-a", pod, "FailedMount", 'MountVolume.SetUp failed for volume "data": nfs: access denied')
    wait_for(lambda: "FailedMount" in reason("task-3"), message="the Event never became the reason")
    assert "nfs: access denied" in reason("task-3")


def test_an_oom_killed_replica_fails_the_run(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_distributed("pytorch"), "task-4", replicas={"master": 1, "worker": 1}))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-4") == "running")
    fake.sim.oom_kill(name, f"{name}-worker-0")
    wait_for(lambda: row_state("task-4") == "failed")
    status = fresh_runtime().poll("task-4")
    assert status.reason.startswith("replica worker-0: OOMKilled")
    assert status.exit_code == 137
    # The training operator deleted the master (cleanPodPolicy Running): only the failed replica remains.
    assert status.replicas == {"worker-0": "Failed"}


def test_an_evicted_pod_fails_the_run_with_the_kubelets_message(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-5"))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-5") == "running")
    fake.sim.evict(name, message="The node was low on resource: ephemeral-storage.")
    wait_for(lambda: row_state("task-5") == "failed")
    assert "Evicted: The node was low on resource: ephemeral-storage." in reason("task-5")


def test_objects_deleted_behind_the_portals_back_make_the_run_lost(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-6"))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-6") == "running")
    fake.store.delete(("batch", "jobs"), "team-a", name, "Foreground")
    wait_for(lambda: row_state("task-6") == "lost", message="stuck running")
    assert f"the Job {name} is gone from cluster fake" in reason("task-6")
    listener.wait_phases("task-6", [Phase.RUNNING, Phase.LOST])
