"""Register a custom image and a job template from the pages in a browser (issue 26, point 5), then remove the image
after the portal's dialog."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.jobs.models import Image, JobTemplate
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_an_image_and_a_template_are_registered_and_the_image_removed(browsing, world):
    browsing.log_in("bob", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1000})
    browsing.goto("/p/project-a/templates/")
    page.get_by_role("link", name="Images").click()
    page.get_by_label("Name", exact=True).fill("registry.example.com/ml/xgb:1.7")
    page.get_by_label("Registry", exact=True).fill("registry.example.com")
    page.get_by_label("Registry username").fill("robot")
    page.get_by_label("Registry password").fill("s3cret-pass")
    page.get_by_role("button", name="Register").click()
    expect(page.locator(".alert-success")).to_have_text("Image registry.example.com/ml/xgb:1.7 registered.")
    expect(page.locator('[data-image="registry.example.com/ml/xgb:1.7"]')).to_contain_text("robot")
    browsing.screenshot("images-1440")

    browsing.goto("/p/project-a/templates/")
    page.get_by_role("link", name="New template").click()
    page.get_by_label("Slug", exact=True).fill("train-xgb")
    page.get_by_label("Name", exact=True).fill("Train XGBoost")
    page.get_by_label("Image", exact=True).fill("registry.example.com/ml/xgb:1.7")
    page.get_by_label("Command", exact=True).fill("python -m trainer")
    page.get_by_label("Argument schema (JSON Schema)").fill(
        '{"type": "object", "properties": {"rounds": {"type": "integer", "default": 10}}}'
    )
    browsing.screenshot("template-form-1440")
    page.get_by_role("button", name="Register").click()
    expect(page.locator(".alert-success")).to_have_text("Template train-xgb@1 registered.")
    template = JobTemplate.objects.get(project=world.project_a, slug="train-xgb")
    assert template.image == "registry.example.com/ml/xgb:1.7"
    expect(page.get_by_label("rounds")).to_have_value("10")  # the argument form made from the schema

    browsing.goto("/p/project-a/images/")
    browsing.wait_for_scripts()
    page.get_by_role("button", name="Remove").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-title")).to_have_text("Remove this image?")
    expect(dialog.locator("#confirm-cancel")).to_be_focused()
    dialog.locator("#confirm-accept").click()
    expect(page.locator(".alert-success")).to_have_text("Image registry.example.com/ml/xgb:1.7 removed.")
    assert not Image.objects.filter(project=world.project_a).exists()
