"""A pipeline's schedules, managed from its page: create one, pause and resume it, see when it runs next, backfill
past dates, delete it. Every rule is jobs.schedules'; the API's ScheduleViewSet calls the same functions."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from apps.jobs import schedules
from apps.jobs.forms import BackfillForm, ScheduleForm
from apps.jobs.models import Pipeline, Schedule
from apps.jobs.views.pipelines import render_detail
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE
from portal.lib.forms import add_service_errors


def _back(schedule: Schedule) -> HttpResponse:
    return redirect("jobs:pipeline-detail", project=schedule.project.slug, pk=schedule.pipeline_id)


@project_view(CONTRIBUTE, model=Pipeline, methods=("POST",))
def schedule_create(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    form = ScheduleForm(request.POST, auto_id="schedule-%s")
    if form.is_valid():
        try:
            schedule = schedules.save_schedule(pipeline=pipeline, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Schedule “%(cron)s” created.") % {"cron": schedule.cron})
            return _back(schedule)
    return render_detail(request, project, pipeline, schedule_form=form, status=400)


@project_view(CONTRIBUTE, model=Schedule, methods=("POST",))
def schedule_pause(request: HttpRequest, project: Project, schedule: Schedule) -> HttpResponse:
    """Pause a running schedule, or resume a paused one."""
    schedule = schedules.save_schedule(schedule, enabled=not schedule.enabled)
    messages.success(request, _("Schedule resumed.") if schedule.enabled else _("Schedule paused."))
    return _back(schedule)


@project_view(CONTRIBUTE, model=Schedule, methods=("POST",))
def schedule_delete(request: HttpRequest, project: Project, schedule: Schedule) -> HttpResponse:
    schedules.delete_schedule(schedule)
    messages.success(request, _("Schedule deleted; the runs it started are kept."))
    return _back(schedule)


@project_view(CONTRIBUTE, model=Schedule, methods=("POST",))
def schedule_backfill(request: HttpRequest, project: Project, schedule: Schedule) -> HttpResponse:
    """Days in the schedule's time zone: from the first day's midnight to the end of the last (or now, for today)."""
    form = BackfillForm(request.POST, auto_id=f"backfill-{schedule.pk}-%s")
    if form.is_valid():
        tz = ZoneInfo(schedule.timezone)
        start = datetime.combine(form.cleaned_data["start"], time.min, tz)
        end = min(datetime.combine(form.cleaned_data["end"] + timedelta(days=1), time.min, tz), timezone.now())
        try:
            runs = schedules.backfill(schedule, request.user, start, end - timedelta(microseconds=1))
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request,
                ngettext("Backfill started %(n)d run.", "Backfill started %(n)d runs.", len(runs)) % {"n": len(runs)}
                if runs
                else _("Every date in this range already has a run of this schedule."),
            )
            return _back(schedule)
    pipeline = schedule.pipeline
    return render_detail(request, project, pipeline, backfill_form=form, backfill_schedule=schedule, status=400)
