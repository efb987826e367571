"""A pipeline's schedules in a browser (issue 26, point 5): create one, read when it runs next, pause and resume it,
backfill two past days, delete it after the portal's dialog."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.jobs.models import PipelineRun, Schedule
from tests import factories
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_schedule_is_created_paused_backfilled_and_deleted(browsing, world):
    pipe = factories.pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "print(1)"}}], name="etl")
    browsing.log_in("bob", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1100})
    browsing.goto(f"/p/project-a/pipelines/{pipe.pk}/")
    browsing.wait_for_scripts()
    page.get_by_text("New schedule").click()
    page.get_by_label("Cron").fill("0 6 * * *")
    page.get_by_label("Time zone").fill("Asia/Shanghai")
    page.get_by_role("button", name="Create schedule").click()
    expect(page.locator(".alert-success")).to_have_text("Schedule “0 6 * * *” created.")
    card = page.locator("[data-schedule]")
    expect(card.locator("[data-next-runs] time")).to_have_count(3)
    expect(card.locator("[data-next-runs] time").first).to_contain_text("06:00")
    schedule = Schedule.objects.get(pipeline=pipe)

    card.get_by_role("button", name="Pause").click()
    expect(page.locator(".alert-success")).to_have_text("Schedule paused.")
    expect(page.locator("[data-schedule] [data-next-runs]")).to_have_text("Paused: no run is planned.")
    page.locator("[data-schedule]").get_by_role("button", name="Resume").click()
    expect(page.locator(".alert-success")).to_have_text("Schedule resumed.")

    card = page.locator("[data-schedule]")
    card.get_by_text("Backfill past dates").click()
    today = timezone.now().date()
    card.get_by_label("From").fill((today - timedelta(days=3)).isoformat())
    card.get_by_label("To").fill((today - timedelta(days=2)).isoformat())
    browsing.screenshot("schedule-1440")
    card.get_by_role("button", name="Backfill", exact=True).click()
    expect(page.locator(".alert-success")).to_have_text("Backfill started 2 runs.")
    assert PipelineRun.objects.filter(schedule=schedule, trigger="backfill").count() == 2
    browsing.wait_for_scripts()  # the page after the backfill: Delete asks through portal.js's dialog

    page.locator("[data-schedule]").get_by_role("button", name="Delete").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-body")).to_have_text(
        "The schedule “0 6 * * *” stops starting runs; the runs it started are kept."
    )
    expect(dialog.locator("#confirm-cancel")).to_be_focused()
    dialog.locator("#confirm-accept").click()
    expect(page.locator(".alert-success")).to_have_text("Schedule deleted; the runs it started are kept.")
    assert not Schedule.objects.exists()
    assert PipelineRun.objects.filter(trigger="backfill").count() == 2
