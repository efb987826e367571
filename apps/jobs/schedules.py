"""Cron schedules, evaluated by Celery beat every few seconds (`tick`)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.jobs.models import RUN_FINISHED, RunStatus, Schedule

log = logging.getLogger("portal.schedules")
MAX_CATCHUP = 100  # never start more than this many missed runs in one tick
MAX_BACKFILL = 50  # runs one backfill may start: a wider range is refused, not cut short silently


def cron_fields_ok(cron: str) -> bool:
    """Five fields (minute hour day month weekday) or a nickname (@daily). croniter also reads a sixth field as
    seconds and a seventh as the year, so "0 0 * * * * *" meant every second: a run at every beat tick."""
    fields = cron.split()
    return len(fields) == 5 or (len(fields) == 1 and fields[0].startswith("@"))


def validate_schedule(cron: str, tz: str) -> None:
    errors = {}
    if not croniter.is_valid(cron):
        errors["cron"] = [_("“%(cron)s” is not a cron expression (e.g. “0 3 * * *”).") % {"cron": cron}]
    elif not cron_fields_ok(cron):
        errors["cron"] = [
            _("“%(cron)s” has %(n)s fields; use the five of cron: minute hour day month weekday (e.g. “0 3 * * *”).")
            % {"cron": cron, "n": len(cron.split())}
        ]
    else:
        try:  # "0 0 30 2 *" parses but never fires; croniter only finds out when asked for a date
            croniter(cron).get_next(datetime)
        except CroniterError:
            errors["cron"] = [_("“%(cron)s” never matches a date.") % {"cron": cron}]
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = [_("Unknown time zone “%(tz)s”.") % {"tz": tz}]
    if errors:
        raise ValidationError(errors)


def save_schedule(schedule: Schedule | None = None, **fields: Any) -> Schedule:
    """Create (no `schedule`) or change a schedule: its cron and time zone are checked, and it belongs to its
    pipeline's project (a schedule moved to another pipeline moves with it). Whether the user may start runs in
    that project is the caller's check."""
    schedule = schedule if schedule is not None else Schedule()
    for name, value in fields.items():
        setattr(schedule, name, value)
    validate_schedule(schedule.cron, schedule.timezone)
    schedule.project = schedule.pipeline.project
    schedule.save()
    return schedule


def delete_schedule(schedule: Schedule) -> None:
    """Delete a schedule; the runs it started stay (their `schedule` is cleared)."""
    schedule.delete()


def next_dates(schedule: Schedule, count: int = 5, now: datetime | None = None) -> list[datetime]:
    """The next `count` dates the schedule fires at (from its start date when that is later than now), in its time
    zone; [] when it is paused or cannot be evaluated."""
    if not schedule.enabled or not cron_fields_ok(schedule.cron):
        return []
    try:
        tz = ZoneInfo(schedule.timezone)
        it = croniter(schedule.cron, max(now or timezone.now(), schedule.start_date).astimezone(tz))
        return [it.get_next(datetime) for _ in range(count)]
    except (CroniterError, ZoneInfoNotFoundError, ValueError):
        return []


def backfill_dates(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The schedule's dates from `start` to `end` (both included), at most MAX_BACKFILL; ValidationError keyed by
    field for a reversed or future range, or one holding more dates."""
    now = timezone.now()
    if end < start:
        raise ValidationError({"end": [_("The end comes before the start.")]})
    if end > now:
        raise ValidationError({"end": [_("A backfill runs past dates; the end is in the future.")]})
    tz = ZoneInfo(schedule.timezone)
    it = croniter(schedule.cron, (start - timedelta(microseconds=1)).astimezone(tz))
    dates: list[datetime] = []
    while (date := it.get_next(datetime)) <= end:
        dates.append(date)
        if len(dates) > MAX_BACKFILL:
            raise ValidationError({"start": [
                _("More than %(n)d dates fall in this range: backfill at most %(n)d at a time.") % {"n": MAX_BACKFILL}
            ]})  # fmt: skip
    if not dates:
        raise ValidationError({"start": [_("The schedule fires at no date in this range.")]})
    return dates


def backfill(schedule: Schedule, user: Any, start: datetime, end: datetime) -> list[Any]:
    """Start one run of the schedule's pipeline per date it fires at from `start` to `end` (each run's logical date
    is that date, trigger "backfill"), oldest first; dates that already have a run of this schedule are skipped.
    Returns the runs started. The queue, quotas and capacity pace them like any runs."""
    from apps.jobs.services import start_run

    dates = backfill_dates(schedule, start, end)
    done = set(schedule.runs.filter(logical_date__in=dates).values_list("logical_date", flat=True))
    return [
        start_run(schedule.pipeline, user, trigger="backfill", schedule=schedule, logical_date=date)
        for date in dates
        if date not in done
    ]


def due_dates(schedule: Schedule, now: datetime) -> list[datetime]:
    """Logical dates that are due and not started yet (all of them with catch-up, else the newest)."""
    if not cron_fields_ok(schedule.cron):  # stored before validation refused it: never every second
        raise ValueError(f"not a five-field cron expression: {schedule.cron!r}")
    tz = ZoneInfo(schedule.timezone)
    start = schedule.last_logical_date or (schedule.start_date - timedelta(microseconds=1))
    if not schedule.catchup:
        # Step back from now: walking forward from the start stops after MAX_CATCHUP dates, which after a
        # long gap (a paused schedule, a minutely cron) is far in the past, not the newest date. The
        # microsecond makes a date exactly `now` count, as it does below.
        newest = croniter(schedule.cron, (now + timedelta(microseconds=1)).astimezone(tz)).get_prev(datetime)
        return [newest] if newest > start else []
    it = croniter(schedule.cron, start.astimezone(tz))
    dates: list[datetime] = []
    while len(dates) < MAX_CATCHUP:
        nxt = it.get_next(datetime)
        if nxt > now:
            break
        dates.append(nxt)
    return dates


def tick(now: datetime | None = None) -> int:
    """Start the runs that are due. Returns how many were started."""
    from apps.jobs.services import start_run

    now = now or timezone.now()
    started = 0
    for schedule_id in Schedule.objects.filter(enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            locked = Schedule.objects.select_for_update().select_related("pipeline", "project")
            schedule = locked.filter(pk=schedule_id).first()
            if schedule is None or not schedule.enabled:  # deleted or paused since the list was read
                continue
            try:
                dates = due_dates(schedule, now)
            except (CroniterError, ZoneInfoNotFoundError, ValueError) as exc:
                # A schedule stored before validation caught its problem must not stall every other one.
                log.warning("schedule %s cannot be evaluated: %s", schedule.pk, exc)
                continue
            for logical_date in dates:
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
