"""Cron schedules, evaluated by Celery beat every few seconds (`tick`)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.jobs.models import RUN_FINISHED, RunStatus, Schedule

log = logging.getLogger("portal.schedules")
MAX_CATCHUP = 100  # never start more than this many missed runs in one tick


def validate_schedule(cron: str, tz: str) -> None:
    errors = {}
    if not croniter.is_valid(cron):
        errors["cron"] = [_("“%(cron)s” is not a cron expression (e.g. “0 3 * * *”).") % {"cron": cron}]
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = [_("Unknown time zone “%(tz)s”.") % {"tz": tz}]
    if errors:
        raise ValidationError(errors)


def due_dates(schedule: Schedule, now: datetime) -> list[datetime]:
    """Logical dates that are due and not started yet (all of them with catch-up, else the newest)."""
    tz = ZoneInfo(schedule.timezone)
    start = schedule.last_logical_date or (schedule.start_date - timedelta(microseconds=1))
    it = croniter(schedule.cron, start.astimezone(tz))
    dates: list[datetime] = []
    while len(dates) < MAX_CATCHUP:
        nxt = it.get_next(datetime)
        if nxt > now:
            break
        dates.append(nxt)
    return dates if schedule.catchup else dates[-1:]


def tick(now: datetime | None = None) -> int:
    """Start the runs that are due. Returns how many were started."""
    from apps.jobs.services import start_run

    now = now or timezone.now()
    started = 0
    for schedule_id in Schedule.objects.filter(enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            schedule = Schedule.objects.select_for_update().select_related("pipeline", "project").get(pk=schedule_id)
            for logical_date in due_dates(schedule, now):
                runs = schedule.runs.all()
                if runs.exclude(status__in=RUN_FINISHED).count() >= schedule.max_active_runs:
                    break  # max active runs: the next tick tries again
                if schedule.depends_on_past:
                    previous = runs.order_by("-logical_date").first()
                    if previous is not None and previous.status != RunStatus.SUCCEEDED:
                        break  # wait for (or stop after) the previous run
                try:
                    start_run(schedule.pipeline, None, trigger="schedule", schedule=schedule, logical_date=logical_date)
                except ValidationError as exc:
                    log.warning("schedule %s could not start %s: %s", schedule.pk, logical_date, exc)
                    break
                schedule.last_logical_date = logical_date
                schedule.save(update_fields=["last_logical_date"])
                started += 1
    return started
