"""Drift monitors: create, change, delete, and run one (compare the window with the reference, store the report, say
so when it drifted)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.datasets.models import DatasetVersion
from apps.models import lineage
from apps.monitoring import data, drift
from apps.monitoring.models import DriftMonitor, DriftReport
from apps.monitoring.signals import drift_detected
from apps.projects.models import Project
from apps.serving.models import InferenceService

logger = logging.getLogger(__name__)

SETTINGS = (
    "reference_version",
    "target_column",
    "threshold",
    "window_hours",
    "min_rows",
    "interval_minutes",
    "enabled",
)
LIMITS = {
    "threshold": (0.001, 100.0),
    "window_hours": (1, 24 * 90),
    "min_rows": (1, 1_000_000),
    "interval_minutes": (1, 7 * 24 * 60),
}
DEFAULTS = {
    "reference_version": None, "target_column": "", "threshold": 0.2, "window_hours": 24, "min_rows": 30,
    "interval_minutes": 60, "enabled": True,
}  # fmt: skip


def _number(value: Any, field: str, errors: dict[str, list[str]]) -> Any:
    low, high = LIMITS[field]
    kind = float if isinstance(low, float) else int
    try:
        number = kind(value)
        if kind is int and isinstance(value, float) and value != int(value):
            raise ValueError
    except (TypeError, ValueError):
        errors.setdefault(field, []).append(_("Enter a number.") if kind is float else _("Enter a whole number."))
        return None
    if not low <= number <= high:
        errors.setdefault(field, []).append(_("Between %(low)s and %(high)s.") % {"low": low, "high": high})
    return number


def clean(project: Project, values: dict[str, Any]) -> dict[str, Any]:
    """The settings checked (errors keyed by field): numbers within their limits, the reference a version of a
    dataset of this project (given as a DatasetVersion, its id or "name@number")."""
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    for field in LIMITS:
        out[field] = _number(values.get(field, DEFAULTS[field]), field, errors)
    out["enabled"] = bool(values.get("enabled", True))
    target = values.get("target_column") or ""
    if not isinstance(target, str) or len(target) > 200:
        errors["target_column"] = [_("A column name of at most 200 characters.")]
    out["target_column"] = target.strip() if isinstance(target, str) else ""
    out["reference_version"] = _reference(project, values.get("reference_version"), errors)
    if errors:
        raise ValidationError(errors)
    return out


def _reference(project: Project, value: Any, errors: dict[str, list[str]]) -> DatasetVersion | None:
    if value in (None, ""):
        return None
    versions = DatasetVersion.objects.filter(dataset__project=project).select_related("dataset")
    if isinstance(value, DatasetVersion):
        found = versions.filter(pk=value.pk).first()
    elif isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        found = versions.filter(pk=int(value)).first()
    elif isinstance(value, str) and (match := lineage.SOURCE.match(value.strip())):
        found = versions.filter(dataset__name=match["name"], number=int(match["number"])).first()
    else:
        found = None
    if found is None:
        errors["reference_version"] = [_("No such dataset version in this project (give its id or name@number).")]
    return found


def create_monitor(project: Project, user: Any, *, service: Any, **values: Any) -> DriftMonitor:
    """A drift monitor of `service` (a service of `project`, by row, id or name), first run due at once."""
    errors: dict[str, list[str]] = {}
    found = _service(project, service)
    if found is None:
        errors["service"] = [_("No such service in this project.")]
    elif DriftMonitor.objects.filter(service=found).exists():
        errors["service"] = [_("This service already has a drift monitor.")]
    try:
        fields = clean(project, values)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            return DriftMonitor.objects.create(project=project, service=found, created_by=user, **fields)
    except IntegrityError:  # a concurrent create
        raise ValidationError({"service": [_("This service already has a drift monitor.")]}) from None


def _service(project: Project, value: Any) -> InferenceService | None:
    services = InferenceService.objects.filter(project=project)
    if isinstance(value, InferenceService):
        return services.filter(pk=value.pk).first()
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return services.filter(pk=int(value)).first()
    if isinstance(value, str) and value:
        return services.filter(name=value).first()
    return None


def update_monitor(monitor: DriftMonitor, **values: Any) -> DriftMonitor:
    """Change settings (those left out stay); a shorter interval applies from now."""
    current = {field: getattr(monitor, field) for field in SETTINGS}
    fields = clean(monitor.project, {**current, **values})
    changed = [k for k, v in fields.items() if getattr(monitor, k) != v]
    for key in changed:
        setattr(monitor, key, fields[key])
    if "interval_minutes" in changed or "enabled" in changed:
        base = monitor.last_run_at or timezone.now()
        monitor.next_run_at = base + monitor.interval
        changed.append("next_run_at")
    if changed:
        monitor.save(update_fields=changed)
    return monitor


def delete_monitor(monitor: DriftMonitor) -> None:
    monitor.delete()


def run_monitor(monitor: DriftMonitor, *, now: Any = None) -> DriftReport:
    """Compare the monitor's window with its reference and store the report; a drifted one sends `drift_detected`
    after the commit. A missing reference or too few rows is a report too (failed / skipped), so the page says why."""
    now = now or timezone.now()
    since = now - timedelta(hours=monitor.window_hours)
    report = DriftReport(monitor=monitor, created_at=now, window_start=since, threshold=monitor.threshold)
    try:
        reference = data.reference_of(monitor)
        report.reference_version = reference
        names, columns = data.reference_table(reference, monitor.target_column)
        report.reference_rows = max((len(v) for v in columns.values()), default=0)
        current, report.current_rows = data.window(monitor.service, since, names)
    except data.NoReference as exc:
        report.status, report.message = DriftReport.Status.FAILED, str(exc)
    else:
        if report.current_rows < monitor.min_rows:
            report.status = DriftReport.Status.SKIPPED
            report.message = _("%(n)d logged rows in the window; %(min)d needed.") % {
                "n": report.current_rows, "min": monitor.min_rows}  # fmt: skip
        else:
            report.features = drift.compare(columns, current)
            report.score = drift.overall(report.features)
            if report.score is None:
                report.status = DriftReport.Status.FAILED
                report.message = _("No logged input matches a column of %(ref)s.") % {"ref": reference.ref}
            else:
                drifted = report.score >= monitor.threshold
                report.status = DriftReport.Status.DRIFTED if drifted else DriftReport.Status.OK
                worst = max(report.features, key=lambda k: report.features[k]["score"])
                report.message = _("Largest drift: %(f)s (PSI %(s).3f).") % {"f": worst, "s": report.score}
    with transaction.atomic():
        report.save()
        DriftMonitor.objects.filter(pk=monitor.pk).update(last_run_at=now, next_run_at=now + monitor.interval)
        if report.drifted:
            transaction.on_commit(lambda: _announce(monitor, report), robust=True)
    monitor.last_run_at, monitor.next_run_at = now, now + monitor.interval
    return report


def _announce(monitor: DriftMonitor, report: DriftReport) -> None:
    drift_detected.send(sender=DriftMonitor, monitor=monitor, report=report, score=report.score)


def claim_due(now: Any = None, limit: int = 50) -> list[int]:
    """Ids of enabled monitors whose run is due, each claimed (its next run moved on) by one caller only."""
    now = now or timezone.now()
    claimed = []
    due = DriftMonitor.objects.filter(Q(enabled=True), next_run_at__lte=now).values_list("pk", "interval_minutes")
    for pk, minutes in due[:limit]:
        # a conditional UPDATE: of two sweeps that saw the same due row, one moves it on, the other updates nothing
        if DriftMonitor.objects.filter(pk=pk, next_run_at__lte=now).update(
            next_run_at=now + timedelta(minutes=minutes)
        ):
            claimed.append(pk)
    return claimed


def series(monitor: DriftMonitor, limit: int = 200) -> dict[str, Any]:
    """What the monitor page's chart draws: per feature, its score at each report (oldest first), the overall score
    and the threshold."""
    reports = list(monitor.reports.exclude(score=None).order_by("-created_at", "-pk")[:limit])[::-1]
    names = sorted({name for r in reports for name in r.features})
    return {
        "t": [r.created_at.isoformat() for r in reports],
        "overall": [r.score for r in reports],
        "features": {n: [r.features.get(n, {}).get("score") for r in reports] for n in names},
        "threshold": monitor.threshold,
    }
