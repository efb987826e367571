"""What the dashboards show: the home page (my projects, my active and recent runs, my notebooks, my projects'
services) and a project's overview (runs today, success rate, the queue with its waiting reasons, CPU- and
GPU-hours, storage and resources in use against the quota).

Every number is counted or summed by the database, in a fixed number of queries whatever the number of runs or
tasks: a project with 10,000 runs renders as fast as one with ten. Lists are sliced before anything is read per
row (a run's progress is a correlated subquery of the few rows shown).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import DatabaseError
from django.db.models import (
    Case,
    Count,
    DateField,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.datasets.quota import USAGE as DATASETS_USAGE
from apps.datasets.quota import pending_bytes, stored_bytes
from apps.jobs.diagnosis import cause_title
from apps.jobs.models import (
    RUN_FINISHED,
    TASK_ACTIVE,
    PipelineRun,
    RunSlot,
    RunSlotDelta,
    RunStatus,
    TaskRun,
    TaskStatus,
    TaskUsageSlot,
    TaskUsageSlotDelta,
)
from apps.jobs.rollups import COMPACT_AFTER, compact
from apps.jobs.usage import recent_usage
from apps.notebooks.models import Notebook
from apps.projects.models import Membership, Project
from apps.projects.permissions import projects_for
from apps.projects.storage import used_bytes
from apps.runtime.usage import Holder, Meter, measure, project_holders
from apps.serving.models import InferenceService
from portal.lib.resources import Resources

ACTIVE_RUN = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING)
ROWS = 8  # rows per list on the dashboards (their counts say how many there are in all)
QUEUE_ROWS = 10
WINDOW_DAYS = 30  # success rate, CPU- and GPU-hours and the charts cover this many days, today included

logger = logging.getLogger(__name__)


# --- Home --------------------------------------------------------------------------------------------------


@dataclass
class Home:
    memberships: list[Membership]
    active_runs: list[PipelineRun]
    active_run_count: int
    recent_runs: list[PipelineRun]
    notebooks: list[Notebook]
    notebook_count: int
    running_notebooks: int
    services: list[InferenceService]
    service_count: int
    ready_services: int

    @property
    def live_projects(self) -> list[str]:
        """Slugs of the projects whose notebooks or services are shown: the page follows their events."""
        return sorted({nb.project.slug for nb in self.notebooks} | {svc.project.slug for svc in self.services})


def _count(qs: QuerySet, **filters: Any) -> Subquery:
    """A correlated COUNT of `qs` rows whose project is the outer row's project."""
    counted = qs.filter(project=OuterRef("project"), **filters).order_by().values("project")
    return Coalesce(Subquery(counted.annotate(n=Count("pk")).values("n"), output_field=IntegerField()), 0)


def memberships(user: Any, visible: QuerySet[Project]) -> list[Membership]:
    """The user's projects with their role, member count and how many runs are active in each."""
    return list(
        Membership.objects.filter(user=user, project__in=visible)
        .select_related("project")
        .annotate(
            member_count=_count(Membership.objects.all()),
            active_runs=_count(PipelineRun.objects.all(), status__in=ACTIVE_RUN),
        )
        .order_by("project__name")
    )


def _workspace_rows(user: Any, visible: QuerySet[Project]) -> dict[str, Any]:
    """My notebooks and my projects' services: the rows shown, active ones first, and the counts."""
    nb_active = Case(When(status__in=Notebook.ACTIVE, then=Value(0)), default=Value(1), output_field=IntegerField())
    notebooks = Notebook.objects.filter(owner=user, project__in=visible)
    nb_counts = notebooks.aggregate(total=Count("pk"), running=Count("pk", filter=Q(status=Notebook.Status.RUNNING)))
    services = InferenceService.objects.filter(project__in=visible)
    svc_counts = services.aggregate(
        total=Count("pk"), ready=Count("pk", filter=Q(status=InferenceService.Status.READY))
    )
    svc_order = Case(
        When(status=InferenceService.Status.STOPPED, then=Value(1)), default=Value(0), output_field=IntegerField()
    )
    return {
        "notebooks": list(
            notebooks.select_related("project")
            .annotate(active=nb_active)
            .order_by("active", "project__name", "name")[:ROWS]
        ),
        "notebook_count": nb_counts["total"],
        "running_notebooks": nb_counts["running"],
        "services": list(
            services.select_related("project", "current_revision")
            .annotate(stopped=svc_order)
            .order_by("stopped", "project__name", "name")[:ROWS]
        ),
        "service_count": svc_counts["total"],
        "ready_services": svc_counts["ready"],
    }


def workspaces(user: Any) -> dict[str, Any]:
    """The notebooks and services section alone (what the home page refreshes while one changes state)."""
    data = _workspace_rows(user, projects_for(user).values("pk"))
    home = Home(memberships=[], active_runs=[], active_run_count=0, recent_runs=[], **data)
    return {**data, "live_projects": home.live_projects}


def home(user: Any) -> Home:
    visible = projects_for(user).values("pk")
    mine = PipelineRun.objects.filter(created_by=user, project__in=visible).select_related("project")
    active = list(mine.filter(status__in=ACTIVE_RUN).with_progress().order_by("-created_at", "-pk")[:ROWS])
    recent = mine.filter(status__in=RUN_FINISHED).with_progress().order_by("-created_at", "-pk")[:ROWS]
    return Home(
        memberships=memberships(user, visible),
        active_runs=active,
        active_run_count=mine.filter(status__in=ACTIVE_RUN).count() if len(active) == ROWS else len(active),
        recent_runs=list(recent),
        **_workspace_rows(user, visible),
    )


# --- Project overview -----------------------------------------------------------------------------------


@dataclass
class Overview:
    runs_today: int
    running: int
    queued: int
    succeeded: int
    failed: int
    cpu_hours: float
    gpu_hours: float
    storage_used: int
    storage_pending: int
    storage_limit: int | None
    meters: list[Meter]
    queue: list[TaskRun]
    queue_count: int
    active_runs: list[PipelineRun]
    holders: list[Holder]
    chart: dict[str, Any] = field(default_factory=dict)
    live_meters: list[Meter] = field(default_factory=list)  # what its tasks use now, measured, against the quota
    recent_meters: list[Meter] = field(default_factory=list)  # their peak minute of the last hour
    failure_causes: list[tuple[str, str, int]] = field(default_factory=list)  # (cause, words, failed attempts)

    @property
    def success_rate(self) -> int | None:
        """Succeeded share of the runs that ended succeeded or failed (cancelled ones are neither)."""
        ended = self.succeeded + self.failed
        return round(100 * self.succeeded / ended) if ended else None

    @property
    def storage_percent(self) -> int:
        return min(100, round(100 * self.storage_used / self.storage_limit)) if self.storage_limit else 0

    @property
    def has_activity(self) -> bool:
        """Anything to chart: a run created or a task ended in the window."""
        return any(any(s["data"]) for s in self.chart.get("runs", []) + self.chart.get("hours", []))


def _window_start(today: date) -> datetime:
    return timezone.make_aware(datetime.combine(today - timedelta(days=WINDOW_DAYS - 1), time.min))


def _day_of(field: str, days: list[date]) -> Case:
    """The local day of `field` among `days` (in order, the window's), as ranges of the column: on SQLite,
    `TruncDate` calls a Python function for every row (at 30,000 task runs in the window, 450 ms of the overview's
    520), while comparisons with the days' first instants stay in the database and index nothing differently."""
    return Case(
        *(
            When(**{f"{field}__gte": timezone.make_aware(datetime.combine(day, time.min))}, then=Value(day))
            for day in reversed(days)
        ),
        output_field=DateField(),
    )


def _rolled_up(summary: QuerySet, deltas: QuerySet, key: str, sums: dict[str, str]) -> list[dict[str, Any]]:
    """A roll-up's rows of the window by (day, `key`): the summary's and the deltas not yet compacted, in ONE
    statement (`UNION ALL`, one snapshot), so a compaction committing meanwhile is seen whole or not at all and the
    sum is exact. When the window had many deltas (no beat running, say), compacts them for the next fetch."""
    grouped = [
        queryset.values("day", key).annotate(**{n: Sum(c) for n, c in sums.items()}, rows=rows).order_by()
        for queryset, rows in ((summary, Value(0)), (deltas, Count("pk")))
    ]
    merged: dict[tuple, dict[str, Any]] = {}
    read_deltas = 0
    for row in grouped[0].union(grouped[1], all=True):
        read_deltas += row.pop("rows")
        into = merged.setdefault((row["day"], row[key]), {"day": row["day"], key: row[key]} | dict.fromkeys(sums, 0))
        for name in sums:
            into[name] += row[name] or 0
    if read_deltas > COMPACT_AFTER:
        try:
            compact()
        except DatabaseError:  # the request's statement timeout, say: beat's compaction will do it; the page is done
            logger.warning("the overview could not compact the roll-ups' deltas", exc_info=True)
    first = next(iter(sums))
    return [row for row in merged.values() if row[first]]


def _runs_by_day(project: Project, since: datetime, days: list[date]) -> list[dict[str, Any]]:
    """Runs created each day of the window by status, from the roll-up of quarter hours (`RunSlot` and its deltas):
    at most 96 rows per day and status whatever the number of runs. `since` and the days' starts are local midnights,
    which fall on a quarter hour in every zone in use, so a slot lies within one local day."""
    return _rolled_up(
        *(
            model.objects.filter(project=project, slot__gte=since).annotate(day=_day_of("slot", days))
            for model in (RunSlot, RunSlotDelta)
        ),
        key="status",
        sums={"n": "runs"},
    )


def _usage_by_day(project: Project, since: datetime, days: list[date]) -> list[dict[str, Any]]:
    """CPU-seconds the tasks that ended each day used, and GPU-seconds they held (GPUs asked × wall time), by the
    diagnosed cause of their failures (empty: not failed): the failures by cause come with the same query. Read from
    the roll-up of quarter hours (`TaskUsageSlot` and its deltas), like the runs."""
    return _rolled_up(
        *(
            model.objects.filter(project=project, slot__gte=since).annotate(day=_day_of("slot", days))
            for model in (TaskUsageSlot, TaskUsageSlotDelta)
        ),
        key="failure_cause",
        sums={"n": "tasks", "cpu": "cpu_seconds", "gpu": "gpu_seconds"},
    )


def _failure_causes(usage: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """(cause, its words, failed attempts) in the window, most frequent first."""
    counts: dict[str, int] = defaultdict(int)
    for row in usage:
        if row["failure_cause"]:
            counts[row["failure_cause"]] += row["n"]
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(cause, cause_title(cause), n) for cause, n in ranked]


def _chart(days: list[date], runs: list[dict[str, Any]], usage: list[dict[str, Any]]) -> dict[str, Any]:
    """The overview's chart data: runs per day by outcome, CPU- and GPU-hours per day (labels translated)."""
    index = {day: i for i, day in enumerate(days)}
    outcome = {RunStatus.SUCCEEDED: "succeeded", RunStatus.FAILED: "failed"}
    counts = {key: [0] * len(days) for key in ("succeeded", "failed", "other")}
    for row in runs:
        if row["day"] in index:
            counts[outcome.get(row["status"], "other")][index[row["day"]]] += row["n"]
    hours = {key: [0.0] * len(days) for key in ("cpu", "gpu")}
    for row in usage:  # a day has a row per failure cause
        if row["day"] in index:
            for key in hours:
                hours[key][index[row["day"]]] += (row[key] or 0) / 3600
    hours = {key: [round(value, 2) for value in values] for key, values in hours.items()}
    return {
        "days": [day.isoformat() for day in days],
        "runs": [
            {"name": _("Succeeded"), "status": "succeeded", "data": counts["succeeded"]},
            {"name": _("Failed"), "status": "failed", "data": counts["failed"]},
            {"name": _("Other"), "status": "other", "data": counts["other"]},
        ],
        "hours": [
            {"name": _("CPU-hours"), "data": hours["cpu"]},
            {"name": _("GPU-hours"), "data": hours["gpu"]},
        ],
        "title_runs": _("Runs per day"),
        "title_hours": _("CPU- and GPU-hours per day"),
    }


def overview(project: Project) -> Overview:
    today = timezone.localdate()
    since = _window_start(today)
    days = [today - timedelta(days=n) for n in range(WINDOW_DAYS - 1, -1, -1)]
    # Tasks queued or running belong to active runs: one query counts both (the runs distinct over the join).
    now_counts = PipelineRun.objects.filter(project=project, status__in=ACTIVE_RUN).aggregate(
        running=Count("pk", filter=Q(status__in=(RunStatus.RUNNING, RunStatus.CANCELLING)), distinct=True),
        queued=Count("pk", filter=Q(status=RunStatus.QUEUED), distinct=True),
        tasks=Count("tasks", filter=Q(tasks__status__in=TASK_ACTIVE)),
    )
    runs = _runs_by_day(project, since, days)
    usage = _usage_by_day(project, since, days)
    waiting = TaskRun.objects.filter(
        run__project=project,
        run__status__in=ACTIVE_RUN,
        status__in=(TaskStatus.WAITING, TaskStatus.QUEUED),
    )
    queue = list(
        waiting.select_related("run")
        .defer("run__spec")
        .annotate(waits=Case(When(status=TaskStatus.WAITING, then=Value(0)), default=Value(1)))
        .order_by("waits", F("run__priority").desc(), "created_at", "pk")[:QUEUE_ROWS]
    )
    active = PipelineRun.objects.filter(project=project, status__in=ACTIVE_RUN).with_progress()
    active = active.select_related("project", "created_by").order_by("-created_at", "-pk")[:ROWS]
    holders = project_holders(project)
    # Everything the quota counts: dataset files, and what other apps store (tracking artifacts).
    storage_used = stored_bytes(project) + used_bytes(project, exclude=[DATASETS_USAGE])
    storage_pending = pending_bytes(project)
    quota = getattr(project, "quota", None)
    limit = (lambda name: getattr(quota, name, None)) if quota is not None else (lambda name: None)
    cpu_limit, gpu_limit = limit("cpu_cores"), limit("gpus")
    held = sum((h.resources for h in holders), Resources.none())
    meters = [
        Meter(_("CPU cores"), held.cpu, float(cpu_limit) if cpu_limit is not None else None),
        Meter(_("Memory"), held.memory, limit("memory_bytes"), kind="bytes"),
        Meter(_("GPUs"), held.gpu, float(gpu_limit) if gpu_limit is not None else None),
        Meter(_("Concurrent runs"), now_counts["running"], limit("concurrent_runs")),
        Meter(_("Concurrent tasks"), now_counts["tasks"], limit("concurrent_tasks")),
        Meter(_("Storage"), storage_used + storage_pending, limit("storage_bytes"), kind="bytes"),
    ]
    cpu_quota = float(cpu_limit) if cpu_limit is not None else None
    now = measure(holders)
    live_meters = [
        Meter(_("CPU cores in use"), round(now.cpu, 2), cpu_quota),
        Meter(_("Memory in use"), now.memory_bytes, limit("memory_bytes"), kind="bytes"),
    ]
    if now.gpu_percent is not None:
        live_meters.append(Meter(_("GPU memory in use"), now.gpu_memory_bytes or 0, None, kind="bytes"))
        live_meters.append(Meter(_("GPU utilisation (mean, %)"), round(now.gpu_percent, 1), 100))
    recent = recent_usage(project)
    recent_meters = [
        Meter(_("CPU cores, peak minute"), max((p["cpu"] for p in recent), default=0), cpu_quota),
        Meter(
            _("Memory, peak minute"),
            max((p["memory_bytes"] for p in recent), default=0),
            limit("memory_bytes"),
            kind="bytes",
        ),
    ]
    return Overview(
        live_meters=live_meters,
        recent_meters=recent_meters,
        runs_today=sum(row["n"] for row in runs if row["day"] == today),
        running=now_counts["running"],
        queued=now_counts["queued"],
        succeeded=sum(row["n"] for row in runs if row["status"] == RunStatus.SUCCEEDED),
        failed=sum(row["n"] for row in runs if row["status"] == RunStatus.FAILED),
        cpu_hours=sum(row["cpu"] or 0 for row in usage) / 3600,
        gpu_hours=sum(row["gpu"] or 0 for row in usage) / 3600,
        storage_used=storage_used,
        storage_pending=storage_pending,
        storage_limit=limit("storage_bytes"),
        meters=meters,
        queue=queue,
        queue_count=waiting.count() if len(queue) == QUEUE_ROWS else len(queue),
        active_runs=list(active),
        holders=holders,
        chart=_chart(days, runs, usage),
        failure_causes=_failure_causes(usage),
    )
