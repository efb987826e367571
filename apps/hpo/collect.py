"""Where a trial's metric values come from (the study's `collector`): the tracking runs its pipeline run logged to
the portal's MLflow API (the default), or `name=value` lines its tasks printed on stdout (Katib's StdOut collector,
for experiments imported from Katib). Both give the first objective's points per step, for the pruner, and each
objective's result by its strategy (latest, min or max)."""

from __future__ import annotations

import math
import re
from functools import reduce
from operator import or_

from django.db.models import Max, Min, Q
from django.utils.translation import gettext as _

from apps.hpo.models import Study, Trial


def points(study: Study, trial: Trial) -> list[tuple[int, float]]:
    """The trial's new (step, value) points of the first objective, after `trial.last_step`."""
    metric = study.metric_names[0]
    if study.collector_kind == "stdout":
        series = stdout_series(study, trial).get(metric, [])
        found = list(enumerate(series, start=1))  # Katib numbers a metric's observations in the order printed
        return [(step, value) for step, value in found if trial.last_step is None or step > trial.last_step]
    return _tracked_points(trial, metric)


def _tracked_points(trial: Trial, metric: str) -> list[tuple[int, float]]:
    """The last value of each step of `metric` in the trial's tracking run(s)."""
    from apps.models.models import Metric

    qs = Metric.objects.filter(run__source_pipeline_run_id=trial.run_id, key=metric, is_nan=False)
    if trial.last_step is not None:
        qs = qs.filter(step__gt=trial.last_step)
    by_step: dict[int, float] = {}
    for step, value in qs.order_by("step", "timestamp", "pk").values_list("step", "value"):
        by_step[step] = value
    return sorted(by_step.items())


def final_values(study: Study, trial: Trial) -> tuple[list[float] | None, str]:
    """Each objective's result (by its strategy), or None and what is missing."""
    series = stdout_series(study, trial) if study.collector_kind == "stdout" else None
    values = []
    for objective in study.objectives:
        metric, strategy = objective["metric"], objective.get("strategy", "latest")
        value = _pick(series.get(metric, []), strategy) if series is not None else _tracked(trial, metric, strategy)
        if value is None:
            if series is not None:
                return None, _("The run printed no line “%(metric)s=…”.") % {"metric": metric}
            return None, _("The run logged no metric “%(metric)s”.") % {"metric": metric}
        if not math.isfinite(value):
            return None, _("The metric “%(metric)s” is not a finite number.") % {"metric": metric}
        values.append(value)
    return values, ""


def _pick(series: list[float], strategy: str) -> float | None:
    finite = [v for v in series if math.isfinite(v)]
    if not series:
        return None
    if strategy == "min":
        return min(finite) if finite else series[-1]
    if strategy == "max":
        return max(finite) if finite else series[-1]
    return series[-1]


def _tracked(trial: Trial, metric: str, strategy: str) -> float | None:
    from apps.models.models import LatestMetric, Metric

    if strategy in ("min", "max"):
        rows = Metric.objects.filter(run__source_pipeline_run_id=trial.run_id, key=metric, is_nan=False)
        return rows.aggregate(v=Min("value") if strategy == "min" else Max("value"))["v"]
    latest = (
        LatestMetric.objects.filter(run__source_pipeline_run_id=trial.run_id, key=metric)
        .order_by("-run__start_time", "-run_id")
        .first()
    )
    if latest is None:
        return None
    return math.nan if latest.is_nan else latest.value


def stdout_series(study: Study, trial: Trial) -> dict[str, list[float]]:
    """The objectives' values in the order the trial's tasks printed them, parsed with the study's formats (each a
    regular expression whose first group is the name and second the value, as Katib's filters)."""
    from apps.jobs.models import LogLine

    names = set(study.metric_names)
    formats = [re.compile(f) for f in study.collector.get("formats", [])]
    lines = LogLine.objects.filter(run_id=trial.run_id, stream="stdout").filter(
        reduce(or_, (Q(text__contains=name) for name in names))
    )
    series: dict[str, list[float]] = {}
    for text in lines.order_by("pk").values_list("text", flat=True).iterator():
        for pattern in formats:
            for match in pattern.finditer(text):
                name = match.group(1).strip()
                if name not in names:
                    continue
                try:
                    series.setdefault(name, []).append(float(match.group(2)))
                except (TypeError, ValueError):  # "acc=" with nothing a number: not an observation
                    continue
    return series
