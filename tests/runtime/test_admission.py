"""apps/runtime/admission.py: one function decides whether a project's work may start now and where — its quota
after what it holds, then the capacity of the project's own runtime (never this host for a project on Kubernetes)."""

from __future__ import annotations

import os
import socket

import pytest

from apps.runtime.admission import admit, node_limits, quota_limits, too_large
from apps.runtime.models import Agent
from apps.runtime.placement import Pools
from portal.lib.resources import Resources
from tests.notebooks.factories import heartbeat_agent
from tests.runtime.factories import ClusterFactory, bind, node, set_inventory

pytestmark = pytest.mark.django_db

GiB = 2**30


@pytest.fixture
def kube_project(world):
    """Project A on Kubernetes, bound to a cluster with 16 free cores and 2 GPUs; this machine has 4 cores, no GPU."""
    heartbeat_agent(cpu=4, memory_bytes=8 * GiB, gpu=0)
    Agent.objects.create(kind=Agent.Kind.KUBERNETES, hostname=socket.gethostname(), pid=os.getpid(), address="")
    cluster = ClusterFactory(name="gpu-a")
    set_inventory(cluster, [node("n1", cpu=(16, 0), memory=(64 * GiB, 0), gpu=(2, 0))])
    project = world.project_a
    project.runtime = "kubernetes"
    project.save(update_fields=["runtime"])
    bind(cluster, project, is_default=True)
    return project


def test_a_kubernetes_project_is_admitted_by_its_cluster_not_this_host(kube_project):
    admission = admit(kube_project, Resources.of(cpu=8, gpu=2), in_use=None, pools=Pools())

    assert admission.refusal is None
    assert admission.pool.cluster == "gpu-a"


def test_the_pass_debits_what_it_placed(kube_project):
    pools = Pools()
    first = admit(kube_project, Resources.of(cpu=1, gpu=2), in_use=None, pools=pools)
    pools.take(first.pool, Resources.of(cpu=1, gpu=2))

    second = admit(kube_project, Resources.of(cpu=1, gpu=1), in_use=None, pools=pools)
    assert second.pool is None
    assert second.refusal.waiting == "waiting for 1 GPU — 0 of 2 free on cluster gpu-a"


def test_the_quota_refuses_before_any_pool_and_says_what_is_in_use(kube_project):
    kube_project.quota.gpus = 2
    kube_project.quota.save()

    admission = admit(kube_project, Resources.of(cpu=1, gpu=1), in_use=Resources.of(gpu=1.5), pools=Pools())

    assert admission.pool is None
    assert str(admission.shortfall) == "1 GPU — quota 1.5/2 in use"
    assert admission.refusal.waiting == "waiting for 1 GPU — quota 1.5/2 in use"


def test_a_local_project_without_an_agent_is_told_to_start_one(world):
    admission = admit(world.project_a, Resources.of(cpu=1), in_use=None, pools=Pools())

    assert admission.pool is None
    assert str(admission.refusal) == "no agent is running on this machine (start it with `manage.py runagent`)"


def test_too_large_names_the_limit_and_what_sets_it(kube_project):
    assert too_large(Resources.of(cpu=32), node_limits(kube_project)) == {
        "cpu": "asks for 32 CPU cores; the limit is 16 (the capacity of cluster gpu-a)"
    }
    kube_project.quota.memory_bytes = GiB
    kube_project.quota.save()
    assert too_large(Resources.of(cpu=1, memory=GiB // 2), quota_limits(kube_project), replicas=3) == {
        "memory": "asks for 1.5 GiB of memory (3 replicas of 512 MiB of memory); the limit is 1 GiB "
        "(the project's quota)"
    }
