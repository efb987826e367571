"""The demo's drift monitor on the `iris` service: payload logging turned on, the reference left to lineage, made
once."""

from __future__ import annotations

import pytest

from apps.monitoring import demo
from apps.serving.services import create_service
from tests import factories

pytestmark = pytest.mark.django_db


def test_the_demo_monitors_the_iris_service_once(world):
    model = factories.registered_model(world.project_a, "iris-classifier")
    service = create_service(
        world.project_a, world.alice, name="iris", allow_waiting=True, registered_model=model, follow_alias="staging"
    )

    monitor = demo.populate(world.project_a, world.alice, service)

    service.refresh_from_db()
    assert service.payload_log_percent == 100
    assert monitor.service == service
    assert monitor.reference_version is None  # through lineage
    assert monitor.target_column == "species"
    assert demo.populate(world.project_a, world.alice, service) == monitor
    assert demo.populate(world.project_a, world.alice, None) is None
