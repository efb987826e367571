"""Cron schedules: validation, which logical dates are due, `tick()` starting runs, and /api/v1/schedules/.

Fixed datetimes throughout: nothing here depends on the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.models import PipelineRun, RunStatus, Schedule
from apps.jobs.schedules import MAX_CATCHUP, due_dates, tick, validate_schedule
from apps.projects.models import Role
from tests.conftest import token_client, user_client
from tests.factories import UserFactory, add_member, pipeline

LIST_URL = "/api/v1/schedules/"
START = datetime(2030, 1, 1, tzinfo=UTC)


def at(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2030, 1, day, hour, minute, tzinfo=UTC)


def daily_at_3(**fields) -> Schedule:
    """An unsaved daily schedule (due_dates needs no database)."""
    return Schedule(cron="0 3 * * *", start_date=START, **fields)


@pytest.fixture
def pipe(world):
    return pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])


def schedule_of(pipe, **fields) -> Schedule:
    return Schedule.objects.create(
        project=pipe.project, pipeline=pipe, cron="0 3 * * *", start_date=START, **fields
    )  # fmt: skip


def scheduled_runs() -> list[tuple[datetime, str]]:
    return list(PipelineRun.objects.order_by("logical_date").values_list("logical_date", "status"))


# --- validate_schedule ------------------------------------------------------------------------


def test_a_valid_schedule_passes():
    validate_schedule("*/15 2-4 * * mon-fri", "Europe/Paris")


@pytest.mark.parametrize("cron", ["not cron", "61 * * * *", "* * *", ""])
def test_it_rejects_a_bad_cron_on_the_cron_field(cron):
    with pytest.raises(ValidationError) as caught:
        validate_schedule(cron, "UTC")

    assert caught.value.message_dict == {"cron": [f"“{cron}” is not a cron expression (e.g. “0 3 * * *”)."]}


@pytest.mark.parametrize("cron", ["0 0 * * * * *", "* * * * * 0 2030", "0 3 * * * 30", "*/5 * * * * *"])
def test_it_rejects_croniters_seconds_and_years_fields(cron):
    """croniter reads a sixth field as seconds and a seventh as the year: "0 0 * * * * *" fired every second, so a
    run started at every beat tick."""
    with pytest.raises(ValidationError) as caught:
        validate_schedule(cron, "UTC")

    [message] = caught.value.message_dict["cron"]
    assert f"has {len(cron.split())} fields; use the five of cron" in message


@pytest.mark.parametrize("cron", ["@daily", "@hourly", "0 3 * * *"])
def test_nicknames_and_five_fields_pass(cron):
    validate_schedule(cron, "UTC")


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "../../etc/passwd", ""])
def test_it_rejects_an_unknown_time_zone_on_the_timezone_field(tz):
    with pytest.raises(ValidationError) as caught:
        validate_schedule("0 3 * * *", tz)

    assert caught.value.message_dict == {"timezone": [f"Unknown time zone “{tz}”."]}


def test_it_rejects_a_cron_that_never_fires():
    with pytest.raises(ValidationError) as caught:
        validate_schedule("0 0 30 2 *", "UTC")  # February 30th

    assert caught.value.message_dict == {"cron": ["“0 0 30 2 *” never matches a date."]}


def test_it_reports_both_problems_at_once():
    with pytest.raises(ValidationError) as caught:
        validate_schedule("nope", "Nowhere/City")

    assert set(caught.value.message_dict) == {"cron", "timezone"}


# --- due_dates --------------------------------------------------------------------------------


def test_without_catchup_only_the_newest_due_date_counts():
    assert due_dates(daily_at_3(), at(5, 12)) == [at(5, 3)]


def test_with_catchup_every_missed_date_is_due_oldest_first():
    assert due_dates(daily_at_3(catchup=True), at(5, 12)) == [at(1, 3), at(2, 3), at(3, 3), at(4, 3), at(5, 3)]


def test_a_date_exactly_now_is_due():
    assert due_dates(daily_at_3(), at(5, 3)) == [at(5, 3)]
    assert due_dates(daily_at_3(catchup=True), at(2, 3)) == [at(1, 3), at(2, 3)]


def test_the_start_date_itself_counts_when_it_matches():
    schedule = Schedule(cron="0 3 * * *", start_date=at(2, 3), catchup=True)

    assert due_dates(schedule, at(3, 12)) == [at(2, 3), at(3, 3)]


def test_nothing_is_due_before_the_start_date():
    assert due_dates(daily_at_3(), at(1, 2)) == []
    assert due_dates(daily_at_3(catchup=True), datetime(2029, 12, 31, 23, tzinfo=UTC)) == []


def test_dates_already_started_are_not_due_again():
    assert due_dates(daily_at_3(catchup=True, last_logical_date=at(3, 3)), at(5, 12)) == [at(4, 3), at(5, 3)]
    assert due_dates(daily_at_3(last_logical_date=at(5, 3)), at(5, 23)) == []


def test_without_catchup_the_newest_date_is_found_after_a_long_gap():
    # More missed dates than a catch-up would start in one tick: without catch-up only now's matters.
    schedule = Schedule(cron="0 * * * *", start_date=START)  # hourly
    now = at(31, 17, 30)

    assert due_dates(schedule, now) == [at(31, 17)]


def test_catchup_starts_at_most_max_catchup_dates_per_tick():
    schedule = Schedule(cron="0 * * * *", start_date=START, catchup=True)

    dates = due_dates(schedule, at(31, 17, 30))

    assert len(dates) == MAX_CATCHUP
    assert dates[0] == START
    assert dates[-1] == START + timedelta(hours=MAX_CATCHUP - 1)


def test_the_cron_is_read_in_the_schedules_time_zone():
    schedule = daily_at_3(timezone="Europe/Paris", catchup=True)  # 03:00 in Paris is 02:00 UTC in winter

    dates = due_dates(schedule, at(3, 2, 30))

    assert dates == [at(1, 2), at(2, 2), at(3, 2)]
    assert all(d.tzinfo is not None for d in dates)


# --- tick -------------------------------------------------------------------------------------


def test_tick_starts_a_run_per_due_schedule_with_its_logical_date(pipe):
    schedule = schedule_of(pipe)

    assert tick(now=at(5, 12)) == 1

    [run] = PipelineRun.objects.all()
    assert run.trigger == "schedule"
    assert run.schedule == schedule
    assert run.logical_date == at(5, 3)
    assert run.status == "queued"
    assert run.pipeline == pipe
    assert run.created_by is None
    schedule.refresh_from_db()
    assert schedule.last_logical_date == at(5, 3)


def test_a_second_tick_at_the_same_time_starts_nothing(pipe):
    schedule_of(pipe, max_active_runs=5)

    assert tick(now=at(5, 12)) == 1
    assert tick(now=at(5, 12)) == 0
    assert PipelineRun.objects.count() == 1


def test_tick_honours_max_active_runs(pipe):
    schedule_of(pipe)  # max_active_runs=1
    assert tick(now=at(5, 12)) == 1

    assert tick(now=at(6, 12)) == 0  # the first run is still queued
    assert scheduled_runs() == [(at(5, 3), "queued")]

    PipelineRun.objects.update(status=RunStatus.SUCCEEDED)
    assert tick(now=at(6, 12)) == 1
    assert scheduled_runs() == [(at(5, 3), "succeeded"), (at(6, 3), "queued")]


def test_catchup_starts_missed_runs_up_to_max_active_runs(pipe):
    schedule = schedule_of(pipe, catchup=True, max_active_runs=3)

    assert tick(now=at(5, 12)) == 3

    assert [d for d, _status in scheduled_runs()] == [at(1, 3), at(2, 3), at(3, 3)]
    schedule.refresh_from_db()
    assert schedule.last_logical_date == at(3, 3)  # the next tick goes on from here
    PipelineRun.objects.update(status=RunStatus.SUCCEEDED)
    assert tick(now=at(5, 12)) == 2
    assert [d for d, _status in scheduled_runs()] == [at(day, 3) for day in range(1, 6)]


def test_depends_on_past_waits_after_a_failed_run(pipe):
    schedule_of(pipe, depends_on_past=True, max_active_runs=5)
    assert tick(now=at(5, 12)) == 1
    PipelineRun.objects.update(status=RunStatus.FAILED)

    assert tick(now=at(6, 12)) == 0
    assert tick(now=at(7, 12)) == 0
    assert scheduled_runs() == [(at(5, 3), "failed")]


def test_depends_on_past_goes_on_after_a_successful_run(pipe):
    schedule_of(pipe, depends_on_past=True, max_active_runs=5)
    assert tick(now=at(5, 12)) == 1
    PipelineRun.objects.update(status=RunStatus.SUCCEEDED)

    assert tick(now=at(6, 12)) == 1
    assert [d for d, _status in scheduled_runs()] == [at(5, 3), at(6, 3)]


def test_without_depends_on_past_a_failed_run_does_not_block(pipe):
    schedule_of(pipe)
    assert tick(now=at(5, 12)) == 1
    PipelineRun.objects.update(status=RunStatus.FAILED)

    assert tick(now=at(6, 12)) == 1


def test_a_schedule_that_cannot_be_evaluated_does_not_stall_the_others(pipe, caplog):
    broken = schedule_of(pipe)
    Schedule.objects.filter(pk=broken.pk).update(cron="0 0 30 2 *")  # stored before validation caught it
    fine = schedule_of(pipe)

    assert tick(now=at(5, 12)) == 1

    assert list(PipelineRun.objects.values_list("schedule", flat=True)) == [fine.pk]
    assert f"schedule {broken.pk} cannot be evaluated" in caplog.text


def test_a_stored_seven_field_cron_never_starts_a_run_per_tick(pipe, caplog):
    broken = schedule_of(pipe)
    Schedule.objects.filter(pk=broken.pk).update(cron="0 0 * * * * *")  # stored before validation refused it

    assert tick(now=at(5, 12)) == 0
    assert tick(now=at(5, 12, 1)) == 0

    assert not PipelineRun.objects.exists()
    assert f"schedule {broken.pk} cannot be evaluated: not a five-field cron expression" in caplog.text


def test_create_with_a_seven_field_cron_is_an_error_on_cron(world, pipe):
    body = {"pipeline": pipe.pk, "cron": "0 0 * * * * *"}

    response = user_client(world.alice).post(LIST_URL, body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["cron"]
    assert not Schedule.objects.exists()


def test_a_disabled_schedule_starts_nothing(pipe):
    schedule_of(pipe, enabled=False)

    assert tick(now=at(5, 12)) == 0
    assert not PipelineRun.objects.exists()


# --- API --------------------------------------------------------------------------------------


def test_create_a_schedule_in_the_pipelines_project(world, pipe):
    body = {"pipeline": pipe.pk, "cron": "0 3 * * *", "timezone": "Europe/Paris", "catchup": True}

    response = user_client(world.bob).post(LIST_URL, body, format="json")

    assert response.status_code == 201, response.content
    data = response.json()
    assert data["project"] == "project-a"
    assert data["pipeline"] == pipe.pk
    assert (data["cron"], data["timezone"], data["catchup"]) == ("0 3 * * *", "Europe/Paris", True)
    assert (data["max_active_runs"], data["depends_on_past"], data["enabled"]) == (1, False, True)
    assert data["last_logical_date"] is None
    schedule = Schedule.objects.get(pk=data["id"])
    assert schedule.project == world.project_a


def test_create_with_a_bad_cron_is_an_error_on_cron(world, pipe):
    response = user_client(world.alice).post(LIST_URL, {"pipeline": pipe.pk, "cron": "every day"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"cron": ["“every day” is not a cron expression (e.g. “0 3 * * *”)."]}
    assert not Schedule.objects.exists()


def test_create_with_an_unknown_time_zone_is_an_error_on_timezone(world, pipe):
    body = {"pipeline": pipe.pk, "cron": "0 3 * * *", "timezone": "Nowhere/City"}

    response = user_client(world.alice).post(LIST_URL, body, format="json")

    assert response.status_code == 400
    assert response.json() == {"timezone": ["Unknown time zone “Nowhere/City”."]}


def test_a_pipeline_of_another_project_cannot_be_scheduled(world):
    theirs = pipeline(world.project_b, world.charlie, [{"name": "a", "args": {"code": "1"}}])

    response = user_client(world.alice).post(LIST_URL, {"pipeline": theirs.pk, "cron": "0 3 * * *"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"pipeline": ["No such pipeline."]}
    assert not Schedule.objects.exists()


def test_a_project_token_cannot_schedule_a_pipeline_of_another_project(world, pipe):
    add_member(world.project_b, world.alice, Role.EDITOR)
    client = token_client(world.alice, project=world.project_b)

    response = client.post(LIST_URL, {"pipeline": pipe.pk, "cron": "0 3 * * *"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"pipeline": ["No such pipeline."]}


def test_a_viewer_cannot_create_a_schedule(world, pipe):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    response = user_client(viewer).post(LIST_URL, {"pipeline": pipe.pk, "cron": "0 3 * * *"}, format="json")

    assert response.status_code == 403
    assert not Schedule.objects.exists()


def test_an_update_validates_the_cron(world, pipe):
    schedule = schedule_of(pipe)

    response = user_client(world.alice).patch(f"{LIST_URL}{schedule.pk}/", {"cron": "nope"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["cron"]
    schedule.refresh_from_db()
    assert schedule.cron == "0 3 * * *"


def test_an_update_cannot_move_the_schedule_to_a_pipeline_the_user_may_not_run(world, pipe):
    # alice may only view project B: a schedule pointing at its pipeline would start runs there for her.
    add_member(world.project_b, world.alice, Role.VIEWER)
    theirs = pipeline(world.project_b, world.charlie, [{"name": "a", "args": {"code": "1"}}], name="theirs")
    schedule = schedule_of(pipe)

    response = user_client(world.alice).patch(f"{LIST_URL}{schedule.pk}/", {"pipeline": theirs.pk}, format="json")

    assert response.status_code == 403
    schedule.refresh_from_db()
    assert schedule.pipeline == pipe


def test_an_update_to_a_pipeline_of_another_project_moves_the_schedule_there(world, pipe):
    add_member(world.project_b, world.alice, Role.EDITOR)
    theirs = pipeline(world.project_b, world.charlie, [{"name": "a", "args": {"code": "1"}}], name="theirs")
    schedule = schedule_of(pipe)

    response = user_client(world.alice).patch(f"{LIST_URL}{schedule.pk}/", {"pipeline": theirs.pk}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["project"] == "project-b"
    schedule.refresh_from_db()
    assert (schedule.pipeline, schedule.project) == (theirs, world.project_b)
