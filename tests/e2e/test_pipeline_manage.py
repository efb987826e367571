"""Duplicate and delete a pipeline from its page in a browser (issue 26, point 5): the copy opens at once; delete asks
in the portal's dialog, saying the runs stay and the schedules go, and Cancel keeps the pipeline."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.jobs.models import Pipeline
from apps.jobs.schedules import save_schedule
from tests import factories
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_pipeline_is_duplicated_then_the_copy_deleted_after_the_dialog(browsing, world):
    pipe = factories.pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "print(1)"}}], name="train")
    browsing.log_in("bob", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 900})
    browsing.goto(f"/p/project-a/pipelines/{pipe.pk}/")
    browsing.wait_for_scripts()
    browsing.screenshot("pipeline-header-1440")
    page.get_by_role("button", name="Duplicate").click()
    expect(page.locator(".alert-success")).to_have_text("Copied train to train-copy.")
    copy = Pipeline.objects.get(name="train-copy")
    assert page.url.endswith(f"/p/project-a/pipelines/{copy.pk}/")
    save_schedule(pipeline=copy, cron="0 3 * * *", timezone="UTC")
    page.reload()
    browsing.wait_for_scripts()

    page.get_by_role("button", name="Delete", exact=True).click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-title")).to_have_text("Delete this pipeline?")
    expect(dialog.locator("#confirm-body")).to_have_text(
        "train-copy and its schedules (1) are deleted. Its runs stay, with their logs."
    )
    expect(dialog.locator("#confirm-cancel")).to_be_focused()
    browsing.screenshot("pipeline-delete-asks-1440")
    dialog.locator("#confirm-cancel").click()
    expect(dialog).to_be_hidden()
    assert Pipeline.objects.filter(pk=copy.pk).exists()
    page.get_by_role("button", name="Delete", exact=True).click()
    dialog.locator("#confirm-accept").click()
    expect(page.locator(".alert-success")).to_have_text("Pipeline train-copy deleted; its runs are kept.")
    assert page.url.endswith("/p/project-a/pipelines/")
    assert list(Pipeline.objects.values_list("name", flat=True)) == ["train"]
