"""apps/projects/usage.py: running notebooks and live model-server replicas hold their share of a project's quota,
and the queue, a notebook's start and the autoscaler all see it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.jobs import orchestrator
from apps.jobs.models import JobTemplate
from apps.jobs.services import save_pipeline, start_run
from apps.notebooks.capacity import place
from apps.notebooks.models import Notebook
from apps.projects.usage import held, in_use
from apps.runtime.models import Agent
from apps.serving.models import Replica, Revision
from portal.lib.resources import Resources
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

    assert held([a.pk, b.pk]) == {a.pk: Resources.of(3.5, 5.5 * GIB, 1), b.pk: Resources.of(1, GIB, 1)}
    two = Notebook.objects.get(name="two")
    assert held([a.pk], except_=("notebook", two.pk))[a.pk] == Resources.of(2.5, 4.5 * GIB, 1)
    assert held([]) == {}


def test_the_quota_leaves_room_after_tasks_notebooks_and_model_servers(world):
    project = world.project_a
    quota = project.quota
    quota.cpu_cores, quota.gpus = 4, 1
    quota.save()
    notebook(project, world.alice, cpu="1", gpu="1", status=Notebook.Status.RUNNING)
    replica(project, Replica.Status.READY, cpu=1.5)
    used = in_use(project)

    assert used == Resources.of(2.5, 1.5 * GIB, 1)  # the notebook factory's 512Mi, the replica's 1Gi
    assert quota.room_for(Resources.of(1, GIB, 0), used) == 1  # memory has no limit
    assert quota.room_for(Resources.of(1, 0, 1), used) == 0
    assert quota.room_for(Resources.none(), used) == 1_000_000  # needs nothing: nothing limits
    assert [str(s) for s in quota.what_would_exceed(Resources.of(2, GIB, 1), used)] == [
        "1 GPU — quota 1/1 in use",
        "2 CPU cores — quota 2.5/4 in use",
    ]


def test_a_notebook_does_not_start_past_what_model_servers_hold(world):
    project = world.project_a
    project.quota.cpu_cores = 2
    project.quota.save()
    replica(project, Replica.Status.READY, cpu=1.5)
    nb = notebook(project, world.alice, cpu="1")

    with pytest.raises(ValidationError, match=r"this notebook needs 1 CPU core — quota 1\.5/2 in use"):
        place(nb)


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
