"""Acceptance 2 for every built-in app (tests/appstore/test_*_app*.py drive each to ready): it installs into a fresh
project, uninstalling removes everything it created (and with `delete_data`, its data and files too), and an install
that fails at its last object leaves nothing behind — no rows, no blobs, no model artifacts, no starter files."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.appstore import bundle as bundles
from apps.appstore import installers
from apps.appstore.models import Installation, InstalledObject
from apps.appstore.services import install, uninstall
from apps.datasets.models import Blob, Dataset
from apps.jobs.models import JobTemplate, Pipeline
from apps.models.models import RegisteredModel
from apps.notebooks import workspace
from apps.notebooks.models import Notebook
from apps.serving.models import InferenceService
from tests.appstore.factories import builtin_version
from tests.factories import ProjectFactory, UserFactory
from tests.serving.factories import artifact_store  # noqa: F401 (fixture)

BUILTINS = sorted(folder.name for folder in bundles.builtin_folders())
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("artifact_store")]


@pytest.fixture
def fresh(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    owner = UserFactory(username="alice")
    return ProjectFactory(owner=owner, slug="fresh"), owner


def project_rows(project) -> dict[str, int]:
    from apps.hpo.models import Study
    from apps.knowledge.models import Chunk, Document, KnowledgeBase

    return {
        "datasets": Dataset.objects.filter(project=project).count(),
        "templates": JobTemplate.objects.filter(project=project).count(),
        "models": RegisteredModel.objects.filter(project=project).count(),
        "pipelines": Pipeline.objects.filter(project=project).count(),
        "services": InferenceService.objects.filter(project=project).count(),
        "notebooks": Notebook.objects.filter(project=project).count(),
        "studies": Study.objects.filter(project=project).count(),
        "knowledge_bases": KnowledgeBase.objects.filter(project=project).count(),
        "documents": Document.objects.filter(knowledge_base__project=project).count(),
        "chunks": Chunk.objects.filter(knowledge_base__project=project).count(),
        "installations": Installation.objects.filter(project=project).count(),
    }


def files_under(*folders) -> list[str]:
    return sorted(str(p) for folder in folders if folder.exists() for p in folder.rglob("*") if p.is_file())


def test_the_catalogue_has_every_app_the_issue_asks_for():
    assert {"tabular-classification", "regression", "image-classification", "text-classification",
            "anomaly-detection", "forecasting", "notebook-starter", "document-qa"} <= set(BUILTINS)  # fmt: skip


@pytest.mark.parametrize("name", BUILTINS)
def test_uninstall_removes_what_the_app_created(name, fresh, django_capture_on_commit_callbacks):
    project, owner = fresh
    installation = install(builtin_version(name), project, owner)
    records = list(installation.created.all())
    assert records, "the app created nothing"
    assert all(record.target is not None for record in records)
    home = workspace.home_dir(project, owner) / installation.name

    kept = uninstall(installation)

    data_kinds = {"datasets", "models", "notebooks"}
    assert {k.split(":")[0] for k in kept} <= data_kinds - {"notebooks"}  # data only; a notebook goes, its files stay
    gone = [r for r in records if f"{r.kind}:{r.name}" not in kept]
    assert all(r.content_type.get_all_objects_for_this_type(pk=r.object_id).count() == 0 for r in gone)
    assert not InstalledObject.objects.exists()
    assert project_rows(project)["installations"] == 0
    if name == "notebook-starter":
        assert files_under(home)  # the user's files stay unless asked

    again = install(builtin_version(name), project, owner, name=f"{name[:40]}-2")
    home = workspace.home_dir(project, owner) / again.name
    with django_capture_on_commit_callbacks(execute=True):
        assert uninstall(again, delete_data=True) == []
    left = project_rows(project)
    assert left["installations"] == 0
    assert left["services"] == left["pipelines"] == left["notebooks"] == left["studies"] == left["templates"] == 0
    assert left["knowledge_bases"] == left["documents"] == left["chunks"] == 0
    assert files_under(home) == []  # starter files go with delete_data too


@pytest.mark.parametrize("name", BUILTINS)
def test_an_install_failing_at_its_last_object_leaves_nothing(name, fresh, monkeypatch, artifact_store):  # noqa: F811
    project, owner = fresh
    version = builtin_version(name)
    last = [kind for kind in installers.installer_kinds() if version.spec.get(kind)][-1]
    real = installers.get_installer(last)

    class Failing:
        kind, order = real.kind, real.order

        def create(self, ctx, entry, where):
            real.create(ctx, entry, where)  # it made its object (and wrote its files), then something failed
            raise ValidationError({"name": ["Refused for the test."]})  # the install prefixes `where`

        def remove(self, obj, *, delete_data, **kwargs):
            return real.remove(obj, delete_data=delete_data, **kwargs)

        def describe(self, entry):
            return real.describe(entry)

    monkeypatch.setitem(installers._INSTALLERS, last, Failing())
    blobs_before = Blob.objects.count()
    with pytest.raises(ValidationError) as caught:
        install(version, project, owner)
    assert list(caught.value.message_dict) == [f"spec.{last}[{len(version.spec[last]) - 1}].name"]
    assert set(project_rows(project).values()) == {0}
    assert not InstalledObject.objects.exists()
    assert Blob.objects.count() == blobs_before
    assert files_under(workspace.project_dir(project), artifact_store) == []
