"""Cancel deletes a workload's objects with foreground propagation (pods first) and ends it cancelled."""

from __future__ import annotations

from apps.runtime.models import KubeWorkload
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.conftest import fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_distributed, sample_job


def test_cancelling_a_running_job_deletes_it_and_its_pods_in_the_foreground(fake, cluster, listener, run_controller):
    run_controller()
    runtime = fresh_runtime()
    runtime.submit(mine(sample_distributed("pytorch"), "task-1", replicas={"master": 1, "worker": 2}))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    pod = fake.sim.pod_names(name)[0]
    fake.sim.log(name, pod, ["working"])
    wait_for(lambda: row_state("task-1") == "running")
    wait_for(lambda: listener.lines["task-1"])

    runtime.cancel("task-1")
    wait_for(lambda: row_state("task-1") == "cancelled", message="never cancelled")
    assert fake.objects("kubeflow.org", "pytorchjobs", "team-a") == []
    assert fake.objects("", "pods", "team-a") == []
    # Usually one DELETE; a pass that starts before the cancellation is recorded may repeat it (harmless: the
    # object is already going), so the test asks for at least one rather than exactly one.
    assert fake.requests_to("DELETE", f"/namespaces/team-a/pytorchjobs/{name}")
    assert listener.phases("task-1") == [Phase.RUNNING, Phase.CANCELLED]
    assert listener.closed == ["task-1"]
    assert runtime.poll("task-1").reason == "cancelled"


def test_the_delete_asks_for_foreground_propagation(fake, cluster, listener, run_controller):
    run_controller()
    seen: list[dict] = []
    original = fake.store.delete

    def recording_delete(key, namespace, name, propagation=None):
        seen.append({"key": key, "propagation": propagation})
        return original(key, namespace, name, propagation)

    fake.store.delete = recording_delete
    fresh_runtime().submit(mine(sample_job(), "task-2"))
    (_name,) = fake.sim.wait_created()
    wait_for(lambda: KubeWorkload.objects.get(uid="task-2").created)
    fresh_runtime().cancel("task-2")
    wait_for(lambda: row_state("task-2") == "cancelled")
    assert seen == [{"key": ("batch", "jobs"), "propagation": "Foreground"}]
    assert fake.objects("", "pods", "team-a") == []  # a batch/v1 Job's default would have orphaned them


def test_a_cancel_the_cluster_refuses_for_a_while_is_retried(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-3"))
    (_name,) = fake.sim.wait_created()
    wait_for(lambda: KubeWorkload.objects.get(uid="task-3").created)
    refusal = fake.faults.fail("DELETE", r"/jobs/", 503, times=8)
    fresh_runtime().cancel("task-3")
    wait_for(lambda: row_state("task-3") == "cancelled", timeout=30, message="never cancelled")
    assert refusal.hits == 8
    assert fake.objects("batch", "jobs", "team-a") == []


def test_a_workload_cancelled_before_it_was_applied_never_reaches_the_cluster(fake, cluster, listener, run_controller):
    runtime = fresh_runtime()
    runtime.submit(mine(sample_job(), "task-4"))
    runtime.cancel("task-4")
    assert row_state("task-4") == "cancelled"
    run_controller()
    runtime.submit(mine(sample_job(), "task-5"))  # a later one is applied: the controller did look
    fake.sim.wait_created()
    assert [j["metadata"]["labels"]["portal.io/workload"] for j in fake.objects("batch", "jobs", "team-a")] == [
        "task-5"
    ]
