"""Register a model from a tracking run's page in a browser (issue 26, point 5): open the form, pick the run's model
folder, name the model, land on the new version's page."""

from __future__ import annotations

import io

import pytest
from playwright.sync_api import expect

from apps.models import artifacts
from apps.models.models import ModelVersion
from tests.factories import PASSWORD, tracking_run
from tests.serving.factories import artifact_store  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.live,
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("artifact_store"),
]


def test_a_model_is_registered_from_the_run_page(browsing, world):
    run = tracking_run(world.project_a, world.alice, name="train-42")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    artifacts.save(f"{base}/model/MLmodel", io.BytesIO(b"flavors: {}\n"))
    browsing.log_in("bob", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 900})
    browsing.goto(f"/p/project-a/tracking-runs/{run.pk}/")
    browsing.wait_for_scripts()
    page.get_by_text("Register a model").click()
    page.get_by_label("Registered model").fill("churn-classifier")
    expect(page.get_by_label("What to register")).to_have_value("model")
    browsing.screenshot("register-form-1440")
    page.get_by_role("button", name="Register", exact=True).click()
    expect(page.locator(".alert-success")).to_have_text("Registered churn-classifier v1.")
    expect(page.locator("h2.h4")).to_have_text("churn-classifier v1")
    version = ModelVersion.objects.get(registered_model__name="churn-classifier")
    assert version.run == run
    assert page.url.endswith(f"/p/project-a/model-versions/{version.pk}/")
