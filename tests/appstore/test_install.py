"""Installing an app creates every object through its app's service, records them, refuses a second install under
the same name, leaves nothing when it fails half way; uninstalling removes what it made and keeps data unless asked;
an upgrade shows its difference and applies it."""

from __future__ import annotations

import hashlib

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.appstore.bundle import BUILTIN_DIR
from apps.appstore.models import Installation, InstalledObject
from apps.appstore.services import add_version, diff, install, plan, uninstall, upgrade
from apps.datasets import blobs
from apps.datasets.models import Blob, Dataset
from apps.jobs.models import Pipeline
from apps.models.models import RegisteredModel
from apps.projects.models import Role
from apps.serving.models import InferenceService
from tests.appstore.factories import builtin_version, tiny_bundle
from tests.factories import UserFactory, add_member

pytestmark = pytest.mark.django_db


def test_installing_the_tabular_app_creates_its_objects_with_the_parameters(world):
    version = builtin_version()
    assert [kind for kind, _d in plan(version)] == ["datasets", "datasets", "models", "pipelines", "services"]

    installation = install(version, world.project_a, world.alice, parameters={"model": "random_forest"})

    assert installation.name == "tabular-classification"
    assert installation.parameters == {
        "dataset": "tabular-classification-iris", "label_column": "label", "model": "random_forest",
        "min_accuracy": 0.8,
    }  # fmt: skip
    made = [(o.kind, o.name) for o in installation.created.order_by("position")]
    assert made == [
        ("datasets", "tabular-classification-iris"), ("datasets", "tabular-classification-wine"),
        ("models", "tabular-classification-model"), ("pipelines", "tabular-classification"),
        ("services", "tabular-classification"),
    ]  # fmt: skip
    iris = Dataset.objects.get(project=world.project_a, name="tabular-classification-iris")
    assert list(iris.versions.get().files.values_list("path", flat=True)) == ["iris.csv"]
    pipeline = Pipeline.objects.get(project=world.project_a, name="tabular-classification")
    nodes = {n["name"]: n for n in pipeline.spec["nodes"]}
    assert nodes["load"]["args"] == {"dataset": "tabular-classification-iris"}
    assert nodes["train"]["args"]["model"] == "random_forest"
    assert nodes["evaluate"]["args"]["min_accuracy"] == 0.8  # a whole placeholder keeps the parameter's type
    service = InferenceService.objects.get(project=world.project_a, name="tabular-classification")
    assert (service.registered_model.name, service.follow_alias) == ("tabular-classification-model", "staging")
    assert "Waiting for a version at alias “staging”" in service.reason
    assert installation.objects_of("services") == [service]


def test_installing_twice_under_one_name_is_refused_and_another_name_namespaces_it(world):
    version = builtin_version()
    install(version, world.project_a, world.alice)
    with pytest.raises(ValidationError) as caught:
        install(version, world.project_a, world.alice)
    assert "is installed in this project already" in caught.value.message_dict["name"][0]

    second = install(version, world.project_a, world.alice, name="wine-lab", parameters={"dataset": "wine-lab-wine"})
    assert Pipeline.objects.get(project=world.project_a, name="wine-lab").spec["nodes"][0]["args"] == {
        "dataset": "wine-lab-wine"
    }
    assert second.created.count() == 5


def test_bad_parameters_are_field_errors_and_nothing_is_made(world):
    with pytest.raises(ValidationError) as caught:
        install(builtin_version(), world.project_a, world.alice, parameters={"model": "svm", "min_accuracy": 2})
    assert set(caught.value.message_dict) == {"parameters.model", "parameters.min_accuracy"}
    assert not Installation.objects.exists()
    assert not Dataset.objects.exists()


def test_an_install_that_fails_half_way_leaves_nothing_behind(world):
    # The service's name is taken: the datasets, the model and the pipeline were made before it failed.
    InferenceService.objects.create(project=world.project_a, name="tabular-classification")

    with pytest.raises(ValidationError) as caught:
        install(builtin_version(), world.project_a, world.alice)

    assert "already has a service named" in caught.value.message_dict["spec.services[0].name"][0]
    assert not Installation.objects.exists()
    assert not InstalledObject.objects.exists()
    assert not Dataset.objects.exists()
    assert not RegisteredModel.objects.exists()
    assert not Pipeline.objects.exists()
    assert not Blob.objects.exists()
    assert stored_csv_blobs() == []  # the files written to the blob store are gone too


def stored_csv_blobs() -> list[str]:
    """The shipped CSV files of the tabular app that are in the blob store."""
    shas = [hashlib.sha256((BUILTIN_DIR / "tabular-classification" / "data" / f"{n}.csv").read_bytes()).hexdigest()
            for n in ("iris", "wine")]  # fmt: skip
    return [sha for sha in shas if blobs.storage().exists(blobs.blob_storage_name(sha))]


def test_a_viewer_may_not_install(world):
    viewer = UserFactory(username="victor")
    add_member(world.project_a, viewer, Role.VIEWER)
    with pytest.raises(PermissionDenied):
        install(builtin_version(), world.project_a, viewer)


def test_uninstall_removes_what_it_made_and_keeps_data_unless_asked(world):
    version = builtin_version()
    kept_install = install(version, world.project_a, world.alice)
    kept = sorted(uninstall(kept_install))
    assert kept == ["datasets:tabular-classification-iris", "datasets:tabular-classification-wine"]
    assert not Pipeline.objects.exists()
    assert not InferenceService.objects.exists()
    assert not RegisteredModel.objects.exists()  # no trained version yet: nothing to keep
    assert Dataset.objects.filter(project=world.project_a).count() == 2
    assert not Installation.objects.exists()

    Dataset.objects.all().delete()
    gone = install(version, world.project_a, world.alice)
    assert uninstall(gone, delete_data=True) == []
    assert not Dataset.objects.exists()


def test_an_upgrade_shows_what_changes_and_applies_it(world):
    first = add_version(tiny_bundle())
    installation = install(first, world.project_a, world.alice, name="tiny")
    nodes = [{"name": "hello", "template": "python", "args": {"code": "print('hello again')"}}]
    newer = add_version(
        tiny_bundle(
            version="1.1.0",
            pipelines=[{"name": "{{ install }}", "nodes": nodes}],
            models=[{"name": "{{ install }}-model"}],
        )
    )

    changes = diff(installation, newer)
    assert changes == {"added": ["models:tiny-model"], "removed": [], "changed": ["pipelines:tiny"]}

    upgrade(installation, newer, world.alice)
    installation.refresh_from_db()
    assert installation.app_version == newer
    assert Pipeline.objects.get(name="tiny").spec["nodes"][0]["args"]["code"] == "print('hello again')"
    assert RegisteredModel.objects.filter(project=world.project_a, name="tiny-model").exists()
    assert {o.name for o in installation.created.all()} == {"tiny-data", "tiny", "tiny-model"}
    assert diff(installation, first) == {"added": [], "removed": ["models:tiny-model"], "changed": ["pipelines:tiny"]}
