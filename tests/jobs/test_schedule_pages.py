"""A pipeline's schedules from its page and the API (issue 26, point 5): create (cron and time zone checked, errors
on the form with a 400), pause and resume, the next dates it fires at, backfill past dates (one run per date, those
with a run skipped, a too-wide or future range refused), delete after the confirm dialog. Viewers see no controls and
get 403; outsiders 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.jobs import schedules
from apps.jobs.models import PipelineRun, Schedule
from apps.projects.models import Role
from tests import factories
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def pipe(world):
    return factories.pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "print(1)"}}], name="etl")


@pytest.fixture
def daily(pipe):
    return schedules.save_schedule(pipeline=pipe, cron="0 3 * * *", timezone="Europe/Paris")


def detail(pipe) -> str:
    return reverse("jobs:pipeline-detail", kwargs={"project": "project-a", "pk": pipe.pk})


def action(name: str, schedule, project: str = "project-a") -> str:
    return reverse(f"jobs:schedule-{name}", kwargs={"project": project, "pk": schedule.pk})


def test_a_schedule_is_created_from_the_page(client, world, pipe):
    client.force_login(world.bob)
    url = reverse("jobs:schedule-create", kwargs={"project": "project-a", "pk": pipe.pk})
    response = client.post(url, {"cron": "30 6 * * 1", "timezone": "UTC"})
    assert response["Location"] == detail(pipe)
    schedule = Schedule.objects.get(pipeline=pipe)
    assert (schedule.cron, schedule.timezone, schedule.enabled, schedule.project) == (
        "30 6 * * 1", "UTC", True, world.project_a)  # fmt: skip

    response = client.post(url, {"cron": "0 0 * * * * *", "timezone": "Mars/Olympus"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "has 7 fields; use the five of cron" in html
    assert "Unknown time zone “Mars/Olympus”." in html
    assert '<details class="mt-2" id="new-schedule" open>' in html
    assert Schedule.objects.count() == 1


def test_the_page_shows_the_next_dates_in_the_schedules_time_zone(client, world, daily):
    client.force_login(world.bob)
    html = client.get(detail(daily.pipeline)).content.decode()
    expected = schedules.next_dates(daily, 3)
    assert [d.hour for d in expected] == [3, 3, 3]
    for date in expected:
        assert f'<time datetime="{date.isoformat()}">{date:%Y-%m-%d} 03:00</time>' in html
    assert 'data-confirm-title="Delete this schedule?"' in html


def test_pause_stops_the_next_dates_and_resume_brings_them_back(client, world, daily):
    client.force_login(world.bob)
    client.post(action("pause", daily))
    daily.refresh_from_db()
    assert not daily.enabled
    assert schedules.next_dates(daily) == []
    assert "Paused: no run is planned." in client.get(detail(daily.pipeline)).content.decode()
    assert schedules.tick(timezone.now() + timedelta(days=2)) == 0
    client.post(action("pause", daily))
    daily.refresh_from_db()
    assert daily.enabled


def test_backfill_starts_one_run_per_past_date_and_skips_those_done(client, world, daily):
    client.force_login(world.bob)
    today = timezone.now().date()
    days = {"start": (today - timedelta(days=3)).isoformat(), "end": (today - timedelta(days=1)).isoformat()}
    response = client.post(action("backfill", daily), days)
    assert response["Location"] == detail(daily.pipeline)
    runs = PipelineRun.objects.filter(schedule=daily).order_by("logical_date")
    assert [r.trigger for r in runs] == ["backfill"] * 3
    assert [r.logical_date.astimezone(UTC).hour for r in runs] in ([1, 1, 1], [2, 2, 2])  # 03:00 Paris
    assert {r.created_by for r in runs} == {world.bob}

    client.post(action("backfill", daily), days)
    assert PipelineRun.objects.filter(schedule=daily).count() == 3


def test_backfill_refuses_a_reversed_future_or_too_wide_range(client, world, daily):
    client.force_login(world.bob)
    today = timezone.now().date()
    for days, message in [
        ({"start": today.isoformat(), "end": (today - timedelta(days=1)).isoformat()}, "The end comes before"),
        ({"start": (today - timedelta(days=200)).isoformat(), "end": today.isoformat()}, "More than 50 dates"),
        ({"start": "yesterday", "end": today.isoformat()}, "Enter a valid date."),
    ]:
        response = client.post(action("backfill", daily), days)
        assert response.status_code == 400
        assert message in response.content.decode()
    assert not PipelineRun.objects.exists()
    api = user_client(world.bob)
    future = datetime.now(UTC) + timedelta(days=5)
    response = api.post(reverse("api:schedule-backfill", kwargs={"pk": daily.pk}),
                        {"start": datetime.now(UTC).isoformat(), "end": future.isoformat()}, format="json")  # fmt: skip
    assert response.status_code == 400
    assert response.json() == {"end": ["A backfill runs past dates; the end is in the future."]}


def test_the_api_lists_next_runs_and_backfills(world, daily):
    api = user_client(world.bob)
    body = api.get(reverse("api:schedule-detail", kwargs={"pk": daily.pk})).json()
    assert len(body["next_runs"]) == 5
    end = datetime.now(UTC) - timedelta(days=1)
    days = {"start": (end - timedelta(days=1)).isoformat(), "end": end.isoformat()}
    response = api.post(reverse("api:schedule-backfill", kwargs={"pk": daily.pk}), days, format="json")
    assert response.status_code == 201, response.content
    assert len(response.json()) in (1, 2)


def test_delete_keeps_the_runs(client, world, daily):
    run = PipelineRun.objects.create(project=world.project_a, pipeline=daily.pipeline, pipeline_name="etl", number=1,
                                     schedule=daily, spec=daily.pipeline.spec)  # fmt: skip
    client.force_login(world.bob)
    client.post(action("delete", daily))
    assert not Schedule.objects.exists()
    run.refresh_from_db()
    assert run.schedule is None


def test_viewers_see_no_controls_and_get_403_outsiders_404(client, world, daily):
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    html = client.get(detail(daily.pipeline)).content.decode()
    assert "Next runs:" in html
    for name in ("pause", "backfill", "delete"):
        assert action(name, daily) not in html
        assert client.post(action(name, daily)).status_code == 403
    assert "New schedule" not in html
    client.force_login(world.charlie)
    for name in ("pause", "backfill", "delete"):
        assert client.post(action(name, daily)).status_code == 404
    daily.refresh_from_db()
    assert daily.enabled
