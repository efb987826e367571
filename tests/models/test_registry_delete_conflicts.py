"""MLflow's registry deletes (`registered-models/delete`, `model-versions/delete`) of what a service serves: 409
RESOURCE_CONFLICT naming the service, as /api/v1 answers, never a 500; nothing is deleted."""

from __future__ import annotations

from apps.models.models import ModelVersion, RegisteredModel
from apps.serving.models import InferenceService
from apps.serving.services import delete_service
from tests.factories import model_version
from tests.models.conftest import assert_error


def test_deleting_a_served_model_is_a_409_naming_the_service(world, api_a):
    version = model_version(world.project_a, world.alice, "churn")
    service = InferenceService.objects.create(
        project=world.project_a, name="churn-api", created_by=world.alice,
        registered_model=version.registered_model, model_version=version,
    )  # fmt: skip

    body = assert_error(api_a.delete("registered-models/delete", {"name": "churn"}), 409, "RESOURCE_CONFLICT")

    assert "churn-api" in body["message"]
    assert RegisteredModel.objects.filter(pk=version.registered_model_id).exists()
    delete_service(service)
    assert api_a.delete("registered-models/delete", {"name": "churn"}).status_code == 200
    assert not RegisteredModel.objects.filter(pk=version.registered_model_id).exists()


def test_deleting_a_served_version_is_a_409_naming_the_service(world, api_a):
    version = model_version(world.project_a, world.alice, "churn")
    InferenceService.objects.create(
        project=world.project_a, name="churn-api", created_by=world.alice,
        registered_model=version.registered_model, model_version=version,
    )  # fmt: skip

    response = api_a.delete("model-versions/delete", {"name": "churn", "version": str(version.version)})

    body = assert_error(response, 409, "RESOURCE_CONFLICT")
    assert "churn-api" in body["message"]
    assert ModelVersion.objects.filter(pk=version.pk).exists()
