"""apps/projects/usage.py: running notebooks and live model-server replicas hold their share of a project's quota,
and the queue, a notebook's start and the autoscaler all see it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.jobs import orchestrator
from apps.jobs.models import JobTemplate
from apps.jobs.services import save_pipeline, start_run
from apps.notebooks.capacity import check_quota_in_use
from apps.notebooks.models import Notebook
from apps.projects.usage import fits, free_quota, held
from apps.runtime.models import Agent
from apps.serving.models import Replica, Revision
from tests.notebooks.factories import notebook
from tests.serving.replicas import make_service

GIB = 2**30


def replica(project, status: str, *, cpu: float = 1, memory: int = GIB, gpu: float = 0, name: str = "iris") -> Replica:
    service = make_service(project, name)
    revision = Revision.objects.create(
        service=service, number=1, config={"resources": {"cpu": cpu, "memory_bytes": memory, "gpu": gpu}}
    )
    return Replica.objects.create(revision=revision, index=0, status=status)


def test_running_notebooks_and_live_replicas_are_held(world):
    a, b = world.project_a, world.project_b
    notebook(a, world.alice, "one", cpu="2", memory_bytes=4 * GIB, gpu="1", status=Notebook.Status.RUNNING)
    notebook(a, world.alice, "two", cpu="1", memory_bytes=GIB, status=Notebook.Status.STARTING)
    notebook(a, world.alice, "off", cpu="8", status=Notebook.Status.STOPPED)  # stopped: holds nothing
    replica(a, Replica.Status.READY, cpu=0.5, memory=GIB // 2, name="iris")
    replica(a, Replica.Status.FAILED, cpu=4, name="broken")  # failed: holds nothing
    replica(b, Replica.Status.STARTING, cpu=1, gpu=1, name="other")

    assert held([a.pk, b.pk]) == {a.pk: (3.5, 5.5 * GIB, 1.0), b.pk: (1.0, float(GIB), 1.0)}
    two = Notebook.objects.get(name="two")
    assert held([a.pk], except_notebook=two.pk)[a.pk] == (2.5, 4.5 * GIB, 1.0)
    assert held([]) == {}


def test_free_quota_counts_tasks_notebooks_and_model_servers(world):
    project = world.project_a
    assert free_quota(project) == (None, None, None)  # no limits
    project.quota.cpu_cores, project.quota.gpus = 4, 1
    project.quota.save()
    notebook(project, world.alice, cpu="1", gpu="1", status=Notebook.Status.RUNNING)
    replica(project, Replica.Status.READY, cpu=1.5)

    assert free_quota(project) == (1.5, None, 0.0)
    assert fits((1.0, GIB, 0.0), free_quota(project)) == 1
    assert fits((1.0, 0.0, 1.0), free_quota(project)) == 0
    assert fits((0.0, 0.0, 0.0), free_quota(project)) == 1_000_000  # needs nothing: nothing limits


def test_a_notebook_does_not_start_past_what_model_servers_hold(world):
    project = world.project_a
    project.quota.cpu_cores = 2
    project.quota.save()
    replica(project, Replica.Status.READY, cpu=1.5)
    nb = notebook(project, world.alice, cpu="1")

    with pytest.raises(ValidationError, match=r"1\.5 of 2 CPU cores in use, this notebook needs 1"):
        check_quota_in_use(nb)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_node_waits_while_a_notebook_holds_the_projects_gpus(world, settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    Agent.objects.create(hostname="test", pid=1, address="127.0.0.1:9", capacity={"cpu": 8, "gpu": 2})
    project = world.project_a
    project.quota.gpus = 1
    project.quota.save()
    notebook(project, world.alice, gpu="1", status=Notebook.Status.RUNNING)
    JobTemplate.objects.create(slug="noop", name="no-op", command=["/bin/true"], resources={"cpu": 0})
    spec = {"nodes": [{"name": "train", "template": "noop", "resources": {"cpu": 0, "gpu": 1}}]}
    run = start_run(save_pipeline(project, world.alice, name="p", spec=spec), world.alice)

    orchestrator.advance_run(run.pk)

    task = run.tasks.get()
    assert task.status == "waiting"
    assert task.waiting_reason == "waiting for 1 GPU — quota 1/1 in use"
