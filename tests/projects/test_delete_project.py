"""Deleting a project (`services.delete_project`, DELETE /api/v1/projects/{slug}/): whatever it holds is stopped
through its own service and removed with it, in one transaction; a refusal is a 409 naming the blockers."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.datasets.models import Dataset
from apps.jobs.models import PipelineRun, TaskRun, TaskStatus
from apps.models.models import ModelVersion, RegisteredModel
from apps.notebooks.models import Notebook
from apps.projects import services
from apps.projects.models import Project
from apps.runtime.models import LocalWorkload
from apps.serving.models import InferenceService, Replica, Revision
from tests.access import make_run
from tests.conftest import user_client
from tests.factories import model_version


def workload(uid: str) -> LocalWorkload:
    return LocalWorkload.objects.create(uid=uid, spec={}, state=LocalWorkload.State.RUNNING)


def served(project, owner) -> tuple[InferenceService, ModelVersion]:
    """A ready service serving a registered model's version through a running replica."""
    version = model_version(project, owner, "churn")
    service = InferenceService.objects.create(
        project=project, name="churn", created_by=owner, registered_model=version.registered_model,
        model_version=version, status=InferenceService.Status.READY,
    )  # fmt: skip
    revision = Revision.objects.create(
        service=service, number=1, model_version=version, status=Revision.Status.READY, config={"runtime": "local"}
    )
    InferenceService.objects.filter(pk=service.pk).update(current_revision=revision)
    Replica.objects.create(revision=revision, index=0, handle=workload("replica-0").uid, status=Replica.Status.READY)
    return service, version


@pytest.fixture
def work_dir(settings, tmp_path) -> Path:
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return settings.PORTAL_WORK_DIR


def test_it_stops_and_removes_a_served_model_its_notebooks_and_running_runs(
    world, work_dir, django_capture_on_commit_callbacks
):
    project = world.project_a
    served(project, world.alice)
    Notebook.objects.create(
        project=project, owner=world.alice, name="nb", status=Notebook.Status.RUNNING, runtime="local",
        handle=workload("notebook-0").uid,
    )  # fmt: skip
    run = make_run(project, world.alice)
    PipelineRun.objects.filter(pk=run.pk).update(status="running")
    TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING, runtime="local", handle=workload("task-0").uid)
    run_folder = work_dir / project.slug / f"run-{run.number}" / "a" / "attempt-1"
    run_folder.mkdir(parents=True)
    home = work_dir / "projects" / project.slug / "home" / "alice"
    home.mkdir(parents=True)

    with django_capture_on_commit_callbacks(execute=True):
        response = user_client(world.alice).delete(f"/api/v1/projects/{project.slug}/")

    assert response.status_code == 204, response.content
    assert not Project.objects.filter(pk=project.pk).exists()
    for model in (InferenceService, Revision, Replica, Notebook, PipelineRun, TaskRun, ModelVersion):
        assert not model.objects.exists(), model
    assert not RegisteredModel.objects.filter(project_id=project.pk).exists()
    # Every process it ran was told to stop (the agent acts on the flag).
    assert set(LocalWorkload.objects.filter(cancel_requested=True).values_list("uid", flat=True)) == {
        "replica-0", "notebook-0", "task-0",
    }  # fmt: skip
    assert not (work_dir / project.slug).exists()
    assert not (work_dir / "projects" / project.slug).exists()


def test_another_projects_objects_and_folders_stay(world, work_dir, django_capture_on_commit_callbacks):
    served(world.project_b, world.charlie)
    theirs = work_dir / world.project_b.slug / "run-1"
    theirs.mkdir(parents=True)

    with django_capture_on_commit_callbacks(execute=True):
        services.delete_project(world.project_a)

    assert InferenceService.objects.filter(project=world.project_b).count() == 1
    assert not LocalWorkload.objects.filter(cancel_requested=True).exists()
    assert theirs.is_dir()


def test_a_refusal_leaves_everything_as_it_was(world, work_dir, django_capture_on_commit_callbacks):
    """A row outside the project that PROTECTs something inside it (a service of project B serving project A's
    model version) blocks the deletion: 409 naming it, and nothing was stopped or deleted."""
    service, version = served(world.project_a, world.alice)
    InferenceService.objects.create(
        project=world.project_b, name="borrower", created_by=world.charlie, model_version=version
    )

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = user_client(world.alice).delete(f"/api/v1/projects/{world.project_a.slug}/")

    assert response.status_code == 409, response.content
    body = response.json()
    assert body["blocked_by"] == ["inference service “borrower”"]
    assert "borrower" in body["detail"]
    assert Project.objects.filter(pk=world.project_a.pk).exists()
    assert InferenceService.objects.filter(pk=service.pk, status=InferenceService.Status.READY).exists()
    assert Replica.objects.filter(revision__service=service).count() == 1
    assert not LocalWorkload.objects.filter(cancel_requested=True).exists()
    assert not callbacks  # nothing deferred to a commit that never happened


def test_it_purges_the_project_datasets_blobs(world, work_dir, django_capture_on_commit_callbacks):
    from apps.datasets.models import Blob
    from tests.factories import dataset, dataset_version

    version = dataset_version(dataset(world.project_a, world.alice, name="iris"))
    shas = set(version.files.values_list("blob_id", flat=True))
    assert shas

    with django_capture_on_commit_callbacks(execute=True):
        services.delete_project(world.project_a)

    assert not Dataset.objects.filter(project_id=world.project_a.pk).exists()
    assert not Blob.objects.filter(pk__in=shas).exists()
