""" "Deploy this version" from the registry in a browser (issue 26, point 5): from a version's page to a new service,
and to a service of the model after the confirm dialog says what changes."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from apps.serving.services import create_service
from tests.factories import PASSWORD
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, register  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.live,
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("artifact_store"),
]


def test_a_version_is_deployed_to_a_new_service_and_then_to_an_existing_one(browsing, world):
    heartbeat_agent()
    v1 = register(world.project_a, world.alice, iris_bytes())
    v2 = register(world.project_a, world.alice, iris_bytes(c=2))
    browsing.log_in("alice", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 900})
    browsing.goto(f"/p/project-a/model-versions/{v1.pk}/")
    page.get_by_role("link", name="Deploy this version").click()
    expect(page.get_by_role("heading", name="Deploy iris-classifier v1")).to_be_visible()
    expect(page.get_by_label("Service name")).to_have_value("iris-classifier")
    browsing.screenshot("deploy-page-1440")
    page.get_by_label("Service name").fill("iris-api")
    page.get_by_role("button", name="Create and deploy").click()
    expect(page.locator(".alert-success")).to_contain_text("Deploying iris-classifier v1 to iris-api.")
    service = InferenceService.objects.get(name="iris-api")
    assert page.url.endswith(f"/p/project-a/services/{service.pk}/")

    create_service(world.project_a, world.alice, name="batch", registered_model=v1.registered_model, model_version=1)
    browsing.goto(f"/p/project-a/model-versions/{v2.pk}/deploy/")
    browsing.wait_for_scripts()
    row = page.locator('[data-target="iris-api"]')
    row.get_by_role("button", name="Switch to v2").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-title")).to_have_text("Deploy to iris-api?")
    expect(dialog.locator("#confirm-body")).to_contain_text("iris-api rolls out v2")
    expect(dialog.locator("#confirm-cancel")).to_be_focused()  # shown (focus moves once the fade is over)
    browsing.screenshot("deploy-confirm-1440")
    dialog.locator("#confirm-cancel").click()
    service.refresh_from_db()
    assert service.model_version == v1
    row.get_by_role("button", name="Switch to v2").click()
    dialog.locator("#confirm-accept").click()
    expect(page.locator(".alert-success")).to_contain_text("Deploying iris-classifier v2 to iris-api.")
    service.refresh_from_db()
    assert service.model_version == v2
