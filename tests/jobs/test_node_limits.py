"""The largest a pipeline node may ask for: the project's quota and the capacity of where the project's tasks run
(this machine, or its clusters on Kubernetes), each message naming the limit that applies."""

from __future__ import annotations

import os
import socket

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.services import normalize_spec
from apps.runtime.admission import node_limits
from apps.runtime.models import Agent
from tests.factories import python_template
from tests.notebooks.factories import heartbeat_agent
from tests.runtime.factories import ClusterFactory, bind, node, set_inventory

pytestmark = pytest.mark.django_db

GiB = 2**30


def spec_asking(**resources) -> dict:
    python_template()
    return {"nodes": [{"name": "fit", "template": "py", "args": {"code": "1"}, "resources": resources}]}


def errors_of(project, **resources) -> dict[str, list[str]]:
    try:
        normalize_spec(project, spec_asking(**resources))
    except ValidationError as exc:
        return exc.message_dict
    return {}


@pytest.fixture
def kube_project(world):
    """Project A on Kubernetes, bound to a cluster of two 32-core nodes with 8 GPUs; this machine has 4 cores and
    no GPU (a local agent heartbeats, as on a portal that also runs local work)."""
    heartbeat_agent(cpu=4, memory_bytes=8 * GiB, gpu=0)
    Agent.objects.create(kind=Agent.Kind.KUBERNETES, hostname=socket.gethostname(), pid=os.getpid(), address="")
    cluster = ClusterFactory(name="gpu-a")
    set_inventory(
        cluster,
        [
            node("n1", cpu=(32, 0), memory=(128 * GiB, 0), gpu=(4, 0)),
            node("n2", cpu=(32, 0), memory=(128 * GiB, 0), gpu=(4, 0)),
        ],
    )
    project = world.project_a
    project.runtime = "kubernetes"
    project.save(update_fields=["runtime"])
    bind(cluster, project, is_default=True)
    return project


def test_a_kubernetes_project_is_capped_by_its_cluster_not_by_this_machine(kube_project):
    assert errors_of(kube_project, cpu=16, gpu=2, memory="64Gi") == {}
    assert errors_of(kube_project, gpu=9) == {
        "nodes.fit.resources.gpu": ["asks for 9 GPUs; the limit is 8 (the capacity of cluster gpu-a)"]
    }
    limits = node_limits(kube_project)
    assert (limits.amounts.cpu, limits.amounts.memory, limits.amounts.gpu) == (64, 256 * GiB, 8)
    assert limits.to_json() == {  # what the pipeline editor shows next to each field
        "cpu": 64,
        "memory_bytes": 256 * GiB,
        "gpu": 8,
        "sources": dict.fromkeys(("cpu", "memory_bytes", "gpu"), "the capacity of cluster gpu-a"),
    }


def test_the_quota_caps_below_the_cluster_and_is_named(kube_project):
    kube_project.quota.gpus = 2
    kube_project.quota.save()
    assert errors_of(kube_project, gpu=4) == {
        "nodes.fit.resources.gpu": ["asks for 4 GPUs; the limit is 2 (the project's quota)"]
    }


def test_a_local_project_is_capped_by_this_machine_and_the_message_says_so(world):
    heartbeat_agent(cpu=4, memory_bytes=8 * GiB, gpu=0)
    assert errors_of(world.project_a, cpu=8, gpu=1) == {
        "nodes.fit.resources.cpu": ["asks for 8 CPU cores; the limit is 4 (the capacity of this machine)"],
        "nodes.fit.resources.gpu": ["asks for 1 GPU; the limit is 0 (the capacity of this machine)"],
    }


def test_unknown_capacity_caps_nothing_but_the_quota(world):
    world.project_a.quota.cpu_cores = 2
    world.project_a.quota.save()
    assert errors_of(world.project_a, cpu=64, gpu=4) == {  # no agent: this machine's capacity is not known
        "nodes.fit.resources.cpu": ["asks for 64 CPU cores; the limit is 2 (the project's quota)"]
    }
