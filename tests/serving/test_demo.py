"""The demo's `iris` service: it follows the alias the demo pipeline's register step sets, waits (saying so) until
that alias exists, and deploys when it is set."""

from __future__ import annotations

import pytest

from apps.models.registry import set_alias
from apps.serving import demo
from apps.serving.models import InferenceService
from tests.serving.factories import artifact_store, eager_celery, heartbeat_agent, iris_bytes, register  # noqa: F401


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("artifact_store", "eager_celery")
def test_the_demo_service_waits_for_the_pipelines_alias_then_deploys(world):
    heartbeat_agent()
    version = register(world.project_a, world.alice, iris_bytes(), model_name=demo.MODEL)
    set_alias(version.registered_model, "production", 1)  # what the tracking demo sets; not what the service follows

    service = demo.populate(world.project_a, world.alice)
    assert (service.name, service.follow_alias, service.status) == ("iris", "staging", InferenceService.Status.PENDING)
    assert "Waiting for a version at alias “staging” of iris-classifier" in service.reason
    assert not service.revisions.exists()
    assert demo.populate(world.project_a, world.alice) == service  # idempotent

    set_alias(version.registered_model, "staging", 1)  # the pipeline's model-register step
    revision = service.revisions.get()
    assert (revision.number, revision.model_version_id) == (1, version.pk)
    service.refresh_from_db()
    assert service.status == InferenceService.Status.DEPLOYING


def test_without_the_registered_model_there_is_nothing_to_serve(world):
    assert demo.populate(world.project_a, world.alice) is None
