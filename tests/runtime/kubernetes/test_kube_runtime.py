"""KubernetesRuntime: submit writes rows (idempotent, placed on a cluster and namespace), poll reads them, cancel
and the controller's wake-up; the controller's liveness decides readiness."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from django.db import transaction
from django.utils import timezone

from apps.runtime.base import get_runtime
from apps.runtime.kubernetes.runtime import KubernetesRuntime, live_controllers
from apps.runtime.models import Agent, Cluster, KubeWorkload, ProjectCluster
from apps.runtime.workload import Phase
from tests.factories import ProjectFactory, UserFactory
from tests.runtime.kubernetes.conftest import fresh_runtime
from tests.runtime.kubernetes.samples import sample_job


def job(uid: str, **changes: object):
    return dataclasses.replace(sample_job(), uid=uid, **changes)


@pytest.fixture
def second(transactional_db) -> Cluster:
    return Cluster.objects.create(name="zz-second", kubeconfig="{}", default_namespace="batch")


def test_it_is_the_kubernetes_runtime():
    assert isinstance(get_runtime("kubernetes"), KubernetesRuntime)
    assert get_runtime("kubernetes").name == "kubernetes"


def test_submit_is_idempotent_on_the_uid(cluster):
    runtime = KubernetesRuntime()
    assert runtime.submit_many([job("task-1"), job("task-2")]) == ["task-1", "task-2"]
    assert runtime.submit(job("task-1", image="other:1")) == "task-1"
    assert KubeWorkload.objects.count() == 2
    row = KubeWorkload.objects.get(uid="task-1")
    assert row.spec["image"] == "registry.example.com/portal/tasks:1.4"  # the first submission stands
    assert row.state == "pending"
    assert not row.created
    assert runtime.poll("task-1").phase == Phase.PENDING


def test_a_workload_goes_where_it_says_else_to_its_projects_binding_else_to_the_first_cluster(cluster, second):
    project = ProjectFactory(owner=UserFactory(), slug="vision")
    ProjectCluster.objects.create(project=project, cluster=second, namespace="vision-ns", is_default=True)
    runtime = KubernetesRuntime()
    runtime.submit_many(
        [
            job("named", cluster="zz-second", namespace="explicit"),
            job("named-bound", cluster="zz-second", project="vision"),
            job("bound", project="vision"),
            job("anywhere", project="unbound"),
        ]
    )
    placed = {row.uid: (row.cluster.name, row.namespace) for row in KubeWorkload.objects.select_related("cluster")}
    assert placed == {
        "named": ("zz-second", "explicit"),
        "named-bound": ("zz-second", "vision-ns"),
        "bound": ("zz-second", "vision-ns"),
        "anywhere": ("fake", "team-a"),
    }


def test_submitting_to_an_unknown_or_disabled_cluster_is_refused(cluster):
    cluster.enabled = False
    cluster.save()
    runtime = KubernetesRuntime()
    with pytest.raises(LookupError, match="no enabled Kubernetes cluster named 'fake'"):
        runtime.submit(job("task-1", cluster="fake"))
    with pytest.raises(LookupError, match="no enabled Kubernetes cluster"):
        runtime.submit(job("task-1"))
    assert not KubeWorkload.objects.exists()


def test_cancel_ends_an_unapplied_row_at_once_and_asks_the_controller_otherwise(cluster):
    runtime = KubernetesRuntime()
    runtime.submit_many([job("fresh"), job("applied"), job("done")])
    KubeWorkload.objects.filter(uid="applied").update(applied=[{"apiVersion": "batch/v1", "kind": "Job", "name": "x"}])
    KubeWorkload.objects.filter(uid="done").update(state="succeeded")
    for uid in ("fresh", "applied", "done"):
        runtime.cancel(uid)
    rows = {row.uid: row for row in KubeWorkload.objects.all()}
    assert rows["fresh"].state == "cancelled"
    assert rows["fresh"].finished_at is not None
    assert (rows["applied"].state, rows["applied"].cancel_requested) == ("pending", True)
    assert (rows["done"].state, rows["done"].cancel_requested) == ("succeeded", False)
    assert runtime.poll("fresh") == runtime.poll_many(["fresh"])["fresh"]
    assert runtime.poll("fresh").phase == Phase.CANCELLED


def test_poll_reports_the_row_and_lost_for_an_unknown_handle(cluster):
    runtime = KubernetesRuntime()
    runtime.submit(job("task-1"))
    KubeWorkload.objects.filter(uid="task-1").update(
        state="failed", exit_code=137, reason="replica 0: OOMKilled", replicas={"0": "Failed"}
    )
    statuses = runtime.poll_many(["task-1", "nobody"])
    assert statuses["task-1"].phase == Phase.FAILED
    assert statuses["task-1"].exit_code == 137
    assert statuses["task-1"].reason == "replica 0: OOMKilled"
    assert statuses["task-1"].replicas == {"0": "Failed"}
    assert statuses["nobody"].phase == Phase.LOST


def test_submit_wakes_the_live_controllers_after_the_commit(cluster):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(2)
        Agent.objects.create(
            kind=Agent.Kind.KUBERNETES, hostname="test", pid=1, address="{}:{}".format(*sock.getsockname())
        )
        Agent.objects.create(
            kind=Agent.Kind.KUBERNETES, hostname="old", pid=2, address="127.0.0.1:9", stopped_at=timezone.now()
        )
        assert list(live_controllers().values_list("pid", flat=True)) == [1]
        with transaction.atomic():
            fresh_runtime().submit(job("task-1"))
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):  # not before the commit: the controller would find nothing
                sock.recv(16)
        sock.settimeout(2)
        assert sock.recv(16) == b"wake"


def test_local_agents_do_not_make_it_ready(cluster):
    Agent.objects.create(hostname="a-local-agent", pid=1, address="127.0.0.1:9")
    assert not live_controllers().exists()
    assert fresh_runtime().capacity() is None
    assert not fresh_runtime().ready()
