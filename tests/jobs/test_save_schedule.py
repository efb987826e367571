"""`schedules.save_schedule`: the one place a schedule is written (the API's create and update call it)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.models import Schedule
from apps.jobs.schedules import save_schedule
from tests.factories import pipeline


def test_a_new_schedule_belongs_to_its_pipelines_project(world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "pass"}}])

    schedule = save_schedule(pipeline=pipe, cron="0 3 * * *")

    schedule.refresh_from_db()
    assert (schedule.project, schedule.pipeline, schedule.cron, schedule.timezone) == (
        world.project_a,
        pipe,
        "0 3 * * *",
        "UTC",
    )


def test_moving_a_schedule_to_another_projects_pipeline_moves_the_schedule(world):
    ours = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "pass"}}])
    theirs = pipeline(world.project_b, world.charlie, [{"name": "a", "args": {"code": "pass"}}], name="other")
    schedule = save_schedule(pipeline=ours, cron="0 3 * * *")

    save_schedule(schedule, pipeline=theirs)

    assert Schedule.objects.get(pk=schedule.pk).project == world.project_b


def test_a_change_is_checked_against_what_is_stored(world):
    """A body that changes only the time zone is checked with the stored cron, and nothing is saved when it fails."""
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "pass"}}])
    schedule = save_schedule(pipeline=pipe, cron="0 3 * * *")

    with pytest.raises(ValidationError) as caught:
        save_schedule(schedule, timezone="Mars/Olympus")

    assert list(caught.value.message_dict) == ["timezone"]
    assert Schedule.objects.get(pk=schedule.pk).timezone == "UTC"
