"""Cancel deletes a workload's objects with foreground propagation (pods first), in a task, and the controller ends
it cancelled once they are gone."""

from __future__ import annotations

import threading

from django.db import connection

from apps.runtime.kubernetes.controller import Controller
from apps.runtime.models import KubeWorkload
from apps.runtime.tasks import kube_apply, kube_delete
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.conftest import FAST, fresh_runtime, mine, row_state, wait_for
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
    assert len(fake.requests_to("DELETE", f"/namespaces/team-a/pytorchjobs/{name}")) == 1
    listener.wait_phases("task-1", [Phase.RUNNING, Phase.CANCELLED])
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


def test_a_pass_that_reads_the_rows_while_the_cancellation_is_recorded_does_not_end_it_again(fake, cluster, listener):
    """The notifier records an end on its own thread, whenever it gets to it. Here it does at the worst moment: right
    after a pass has read the active rows (this one still among them) and before the pass looks at what is being
    recorded. The pass must not take the row for new work and end it a second time."""
    controller = Controller(FAST)
    controller.leading = True
    deletes: list[str] = []
    original = fake.store.delete

    def recording_delete(key, namespace, name, propagation=None):
        deletes.append(name)
        return original(key, namespace, name, propagation)

    fake.store.delete = recording_delete
    try:
        fresh_runtime().submit(mine(sample_job(), "task-6"))
        assert kube_apply("task-6") == "created"  # the task the submit queued, its body run here
        (job,) = (item["name"] for item in KubeWorkload.objects.get(uid="task-6").applied)
        fresh_runtime().cancel("task-6")
        assert kube_delete("task-6") == "deleted"
        assert len(deletes) == 1
        controller.step()  # its objects are gone: the row goes to the notifier (not running yet) for its record
        kind, tracked = controller.notices.get_nowait()
        assert kind == "finish"

        def record_on_the_notifier_thread() -> None:
            try:
                controller._record_end(tracked)
            finally:
                connection.close()

        def record_after_the_read(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            if not recorded.is_set() and sql.startswith("SELECT") and '"runtime_kubeworkload"."state" IN' in sql:
                recorded.set()
                notifier = threading.Thread(target=record_on_the_notifier_thread)
                notifier.start()
                notifier.join(10)
            return result

        recorded = threading.Event()
        with connection.execute_wrapper(record_after_the_read):
            controller.step()
        assert recorded.is_set()
        assert row_state("task-6") == "cancelled"
        assert controller.notices.empty()  # not handed over for a second record
        controller.step()
        assert deletes == [job]
        listener.wait_phases("task-6", [Phase.CANCELLED])
    finally:
        controller._release(save=False)
        controller.sock.close()
