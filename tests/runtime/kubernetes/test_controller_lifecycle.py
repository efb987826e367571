"""End to end through KubernetesRuntime.submit and the controller: Pending → Running → Succeeded, with the
logs of every replica, for a batch Job and a PyTorchJob; and a failing run."""

from __future__ import annotations

import pytest

from apps.runtime.kubernetes.runtime import KubernetesRuntime
from apps.runtime.models import KubeWorkload
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.conftest import fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import (
    DISTRIBUTED,
    sample_distributed,
    sample_job,
    sample_notebook,
    sample_service,
)


def test_a_batch_job_goes_pending_running_succeeded_with_its_logs(fake, cluster, listener, run_controller):
    run_controller()
    runtime = KubernetesRuntime()
    workload = mine(sample_job(), "task-1")
    handle = runtime.submit(workload)
    assert handle == "task-1"
    assert runtime.poll(handle).phase == Phase.PENDING

    (name,) = fake.sim.wait_created()
    row = KubeWorkload.objects.get(uid="task-1")
    assert row.cluster == cluster
    assert row.namespace == "team-a"
    job = fake.store.get(("batch", "jobs"), "team-a", name)
    assert job["metadata"]["labels"]["portal.io/workload"] == "task-1"
    (pod,) = fake.sim.pod_names(name)

    fake.sim.start(name)
    wait_for(lambda: runtime.poll(handle).phase == Phase.RUNNING, message="never running")
    listener.wait_phases("task-1", [Phase.RUNNING])
    fake.sim.log(name, pod, ["epoch 1", "epoch 2"])
    wait_for(lambda: sum(map(len, listener.lines["task-1"].values())) == 2, message="lines never came")
    fake.sim.log(name, pod, ["done"])
    fake.sim.succeed(name)

    wait_for(lambda: row_state("task-1") == "succeeded", message="never succeeded")
    status = runtime.poll(handle)
    assert status.phase == Phase.SUCCEEDED
    assert status.exit_code == 0
    listener.wait_phases("task-1", [Phase.RUNNING, Phase.SUCCEEDED])
    (replica,) = listener.lines["task-1"]
    assert listener.lines["task-1"][replica] == ["epoch 1", "epoch 2", "done"]
    # The sink was closed before the end was told, so the run saw its last line first.
    assert listener.closed == ["task-1"]
    final = listener.changes[-1][2]
    assert final is not None
    assert final.phase == Phase.SUCCEEDED
    assert final.replicas == {replica: "Succeeded"}
    assert len(fake.objects("batch", "jobs", "team-a")) == 1


def test_a_pytorch_job_streams_the_logs_of_every_replica(fake, cluster, listener, run_controller):
    run_controller()
    runtime = KubernetesRuntime()
    workload = mine(sample_distributed("pytorch"), "task-2", replicas={"master": 1, "worker": 2})
    runtime.submit(workload)
    (name,) = fake.sim.wait_created()
    assert fake.store.get(("kubeflow.org", "pytorchjobs"), "team-a", name)["kind"] == "PyTorchJob"
    pods = fake.sim.pod_names(name)
    assert len(pods) == 3

    fake.sim.start(name)
    wait_for(lambda: row_state("task-2") == "running")
    for pod in pods:
        fake.sim.log(name, pod, [f"{pod} says {i}" for i in range(3)])
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-2") == "succeeded")

    lines = listener.lines["task-2"]
    assert set(lines) == {"master-0", "worker-0", "worker-1"}
    for replica, pod in zip(["master-0", "worker-0", "worker-1"], sorted(pods), strict=True):
        assert lines[replica] == [f"{pod} says {i}" for i in range(3)]
    row = KubeWorkload.objects.get(uid="task-2")
    assert row.replicas == {"master-0": "Succeeded", "worker-0": "Succeeded", "worker-1": "Succeeded"}
    listener.wait_phases("task-2", [Phase.RUNNING, Phase.SUCCEEDED])


def test_a_failed_replica_fails_the_run_with_its_exit_code(fake, cluster, listener, run_controller):
    run_controller()
    runtime = KubernetesRuntime()
    runtime.submit(mine(sample_distributed("pytorch"), "task-3", replicas={"master": 1, "worker": 1}))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-3") == "running")
    fake.sim.fail(name, pod=f"{name}-worker-0", exit_code=3)
    wait_for(lambda: row_state("task-3") == "failed")
    status = runtime.poll("task-3")
    assert status.exit_code == 3
    assert status.reason.startswith("replica worker-0: container pytorch exited with code 3")
    listener.wait_phases("task-3", [Phase.RUNNING, Phase.FAILED])


@pytest.mark.parametrize("framework", sorted(DISTRIBUTED))
def test_every_framework_runs_to_success_with_the_logs_of_each_replica(
    framework, fake, cluster, listener, run_controller
):
    fake.sim.autopilot(outcome="succeeded", lines=2, delay=0.02)
    run_controller()
    uid = f"task-{framework}"
    fresh_runtime().submit(mine(sample_distributed(framework), uid))
    (name,) = fake.sim.wait_created()
    pods = fake.sim.pod_names(name)
    assert len(pods) >= 2
    wait_for(lambda: row_state(uid) == "succeeded", message=f"{framework} never succeeded")
    listener.wait_phases(uid, [Phase.RUNNING, Phase.SUCCEEDED])
    lines = listener.lines[uid]
    assert len(lines) == len(pods)  # one log per replica
    assert sorted(line for replica in lines.values() for line in replica) == sorted(
        f"{pod} line {i}" for pod in pods for i in range(2)
    )
    assert set(KubeWorkload.objects.get(uid=uid).replicas.values()) == {"Succeeded"}


@pytest.mark.parametrize(
    ("workload", "group", "plural"),
    [
        (lambda: sample_service(), "apps", "deployments"),
        (lambda: sample_service("kserve"), "serving.kserve.io", "inferenceservices"),
        (lambda: sample_notebook(), "apps", "statefulsets"),
    ],
    ids=["deployment", "kserve", "notebook"],
)
def test_services_and_notebooks_run_until_cancelled(workload, group, plural, fake, cluster, listener, run_controller):
    fake.sim.autopilot(outcome="hold", lines=1, delay=0.02)
    run_controller()
    runtime = fresh_runtime()
    runtime.submit(mine(workload(), "long-1"))
    wait_for(lambda: row_state("long-1") == "running")
    assert len(fake.objects(group, plural, "team-a")) == 1
    runtime.cancel("long-1")
    wait_for(lambda: row_state("long-1") == "cancelled")
    assert fake.objects(group, plural, "team-a") == []
    assert fake.objects("", "pods", "team-a") == []
    listener.wait_phases("long-1", [Phase.RUNNING, Phase.CANCELLED])
