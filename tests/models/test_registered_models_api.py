"""/api/v1/registered-models/: deleting one that a service serves is a 409 naming the service, not a 500."""

from __future__ import annotations

from apps.models.models import ModelVersion, RegisteredModel
from apps.serving.models import InferenceService, Revision
from apps.serving.services import delete_service
from tests.conftest import user_client
from tests.factories import model_version


def test_deleting_a_served_model_is_a_409_naming_the_service_and_deletes_nothing(world):
    version = model_version(world.project_a, world.alice, "churn")
    model = version.registered_model
    service = InferenceService.objects.create(
        project=world.project_a, name="churn-api", created_by=world.alice, registered_model=model, model_version=version
    )
    client = user_client(world.alice)

    response = client.delete(f"/api/v1/registered-models/{model.pk}/")

    assert response.status_code == 409, response.content
    body = response.json()
    assert body["blocked_by"] == ["inference service “churn-api”"]
    assert "churn-api" in body["detail"]
    assert RegisteredModel.objects.filter(pk=model.pk).exists()
    assert ModelVersion.objects.filter(pk=version.pk).exists()

    delete_service(service)
    assert client.delete(f"/api/v1/registered-models/{model.pk}/").status_code == 204
    assert not RegisteredModel.objects.filter(pk=model.pk).exists()


def test_a_revision_that_served_a_version_also_blocks_it_by_name(world):
    """A service now pointing elsewhere still has the deploy record of what it served (a rollback target)."""
    version = model_version(world.project_a, world.alice, "churn")
    service = InferenceService.objects.create(project=world.project_a, name="svc", created_by=world.alice)
    Revision.objects.create(service=service, number=3, model_version=version, status=Revision.Status.RETIRED)

    response = user_client(world.alice).delete(f"/api/v1/registered-models/{version.registered_model.pk}/")

    assert response.status_code == 409
    assert response.json()["blocked_by"] == ["revision “svc r3”"]
