"""Pages of experiment tracking: the experiments of a project, the runs table of one (filter, sort, columns,
pages, CSV) and the comparison of runs."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from django.core.paginator import Paginator
from django.db.models import Count, Max, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Greatest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.models import search
from apps.models.filters import ExperimentFilterSet
from apps.models.forms import RunSearchForm
from apps.models.models import Experiment, ExperimentKey, LatestMetric, Param, Run, RunTag
from apps.models.querysets import ACTIVE
from apps.models.views.common import decorate_run, format_number, ms_to_datetime
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import VIEW
from portal.lib.listing import listing

PAGE_SIZE = 50
DEFAULT_METRIC_COLUMNS = 6
DEFAULT_PARAM_COLUMNS = 6
MAX_KEYS = 300
MAX_COMPARE = 20
_PLAIN_KEY = re.compile(r"^[\w.\-/:]+$")
ENTITY_PREFIX = {"metric": "metrics", "param": "params", "tag": "tags"}


@dataclass(frozen=True)
class Column:
    """A column of the runs table: an attribute or one metric/param/tag key."""

    entity: str  # attribute, metric, param, tag
    key: str
    label: str

    @property
    def ident(self) -> str:
        """The identifier in the filter/order grammar (and in `?cols=`)."""
        if self.entity == "attribute":
            return self.key
        key = self.key if _PLAIN_KEY.match(self.key) else "`" + self.key.replace("`", "``") + "`"
        return f"{ENTITY_PREFIX[self.entity]}.{key}"


def attribute_columns() -> list[Column]:
    return [
        Column("attribute", "run_name", _("Run")),
        Column("attribute", "status", _("Status")),
        Column("attribute", "start_time", _("Started")),
        Column("attribute", "end_time", _("Ended")),
        Column("attribute", "user_id", _("User")),
    ]


def experiment_keys(experiment: Experiment) -> dict[str, list[str]]:
    """The metric, param and tag keys its active runs logged (system `mlflow.*` tags left out).

    The candidates come from `ExperimentKey` (every key the experiment's runs ever logged); each is kept when an
    active run still has it: one indexed probe per key, where listing the keys of every run is linear in the runs.
    """
    found: dict[str, list[str]] = {}
    for entity, model in (("metric", LatestMetric), ("param", Param), ("tag", RunTag)):
        candidates = ExperimentKey.objects.filter(experiment=experiment, entity=entity)
        if entity == "tag":
            candidates = candidates.exclude(key__startswith="mlflow.")
        # A subquery with LIMIT, not EXISTS: PostgreSQL could turn EXISTS into a semi-join over every run's rows.
        one = model.objects.filter(key=OuterRef("key"), run__experiment=experiment, run__lifecycle_stage=ACTIVE)
        kept = candidates.annotate(one=Subquery(one.values("pk")[:1])).filter(one__isnull=False)
        found[entity] = list(kept.order_by("key").values_list("key", flat=True)[:MAX_KEYS])
    return found


def chosen_columns(request: HttpRequest, keys: dict[str, list[str]]) -> list[Column]:
    """Columns named in `?cols=` (after the chooser was used: `?chosen=1`), else the first metrics and params."""
    available = {
        Column(entity, key, key).ident: Column(entity, key, key) for entity, names in keys.items() for key in names
    }
    if request.GET.get("chosen"):
        return [available[c] for c in request.GET.getlist("cols") if c in available]
    return [Column("metric", k, k) for k in keys["metric"][:DEFAULT_METRIC_COLUMNS]] + [
        Column("param", k, k) for k in keys["param"][:DEFAULT_PARAM_COLUMNS]
    ]


def prefetch_columns(qs: QuerySet[Run], columns: list[Column]) -> QuerySet[Run]:
    wanted = {entity: [c.key for c in columns if c.entity == entity] for entity in ("metric", "param", "tag")}
    return qs.select_related("user").prefetch_related(
        Prefetch("latest_metrics", queryset=LatestMetric.objects.filter(key__in=wanted["metric"]), to_attr="m"),
        Prefetch("params", queryset=Param.objects.filter(key__in=wanted["param"]), to_attr="p"),
        Prefetch("tags", queryset=RunTag.objects.filter(key__in=wanted["tag"]), to_attr="t"),
    )


def cell_values(run: Run, columns: list[Column]) -> list[str]:
    metrics = {m.key: format_number(m.number) for m in run.m}  # type: ignore[attr-defined]
    params = {p.key: p.value for p in run.p}  # type: ignore[attr-defined]
    tags = {t.key: t.value for t in run.t}  # type: ignore[attr-defined]
    source = {"metric": metrics, "param": params, "tag": tags}
    return [source[c.entity].get(c.key, "") for c in columns]


def _sort_state(order: str) -> tuple[str, str, bool] | None:
    if not order:
        return None
    entity, key, ascending = search.parse_order_by(order)
    if entity == "attribute" and key == "created":
        key = "start_time"
    return entity, key, ascending


@project_view(VIEW, methods=("GET",))
def experiment_list(request: HttpRequest, project: Project) -> HttpResponse:
    experiments = (
        Experiment.objects.filter(project=project)
        .annotate(
            run_count=Count("runs", filter=Q(runs__lifecycle_stage="active")),
            activity=Greatest(
                "last_update_time", Coalesce(Max("runs__start_time"), 0), Coalesce(Max("runs__end_time"), 0)
            ),
        )
        .order_by("-activity", "name", "pk")  # the most recently active first, unless the person sorts
    )
    # Deleted experiments only when asked for (MLflow's "view deleted"): `lifecycle_stage=` means either.
    found = listing(request, ExperimentFilterSet, experiments, defaults={"lifecycle_stage": "active"})
    for exp in found.page.object_list:
        exp.last_activity = ms_to_datetime(exp.activity)  # type: ignore[attr-defined]
    context = {"project": project, "listing": found, "tab": "experiments"}
    return render(request, "models/experiment_list.html", context, status=found.status)


@project_view(VIEW, model=Experiment, methods=("GET",))
def experiment_detail(request: HttpRequest, project: Project, experiment: Experiment) -> HttpResponse:
    """The runs table: MLflow filter, server-side sort by any column, column chooser, pages, compare boxes."""
    form = RunSearchForm(request.GET or None)
    keys = experiment_keys(experiment)
    columns = chosen_columns(request, keys)
    runs_qs = Run.objects.filter(experiment=experiment).active()
    page = None
    rows: list[dict] = []
    sort = None
    status = 200
    total_runs = None
    if form.is_bound and not form.is_valid():
        status = 400
    else:
        data = form.cleaned_data if form.is_bound else {"filter": "", "order": "", "page": 1}
        qs = search.filter_and_order_runs(runs_qs, data["filter"], [data["order"]] if data["order"] else [])
        page = Paginator(prefetch_columns(qs, columns), PAGE_SIZE).get_page(data.get("page") or 1)
        if not data["filter"]:
            total_runs = page.paginator.count  # the pager counted them already: not a second COUNT
        rows = [{"run": decorate_run(run), "cells": cell_values(run, columns)} for run in page.object_list]
        sort = _sort_state(data["order"])
    headers = []
    for column in attribute_columns() + columns:
        state = None
        if sort and (sort[0], sort[1]) == (column.entity, column.key):
            state = "ascending" if sort[2] else "descending"
        next_order = f"{column.ident} {'DESC' if state == 'ascending' else 'ASC'}"
        headers.append({"column": column, "state": state, "next_order": next_order})
    chosen = {c.ident for c in columns}
    chooser = {
        entity: [{"ident": Column(entity, k, k).ident, "key": k, "checked": Column(entity, k, k).ident in chosen}
                 for k in names]
        for entity, names in keys.items()
    }  # fmt: skip
    context = {
        "project": project,
        "experiment": experiment,
        "form": form,
        "page": page,
        "rows": rows,
        "headers": headers,
        "extra_columns": columns,
        "chooser": chooser,
        "total_runs": runs_qs.count() if total_runs is None else total_runs,
        "tab": "experiments",
    }
    return render(request, "models/experiment_detail.html", context, status=status)


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_safe(value: str) -> str:
    """Spreadsheets run cells that start with = + @ (or - followed by a letter); quote those as text."""
    if value and (value[0] in "=+@\t\r" or (value[0] == "-" and len(value) > 1 and not value[1].isdigit())):
        return "'" + value
    return value


@project_view(VIEW, model=Experiment, methods=("GET",))
def experiment_export(request: HttpRequest, project: Project, experiment: Experiment) -> HttpResponse:
    """The runs of the current filter and sort as CSV, with the chosen columns (streamed)."""
    form = RunSearchForm(request.GET)
    if not form.is_valid():
        errors = "; ".join(str(e) for errors in form.errors.values() for e in errors)
        return HttpResponse(errors, status=400, content_type="text/plain; charset=utf-8")
    columns = chosen_columns(request, experiment_keys(experiment))
    order = [form.cleaned_data["order"]] if form.cleaned_data["order"] else []
    qs = search.filter_and_order_runs(
        Run.objects.filter(experiment=experiment).active(), form.cleaned_data["filter"], order
    )
    qs = prefetch_columns(qs, columns)
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(
            ["run_id", "run_name", "status", "start_time", "end_time", "user_id"] + [c.ident for c in columns]
        )
        for run in qs.iterator(chunk_size=500):
            started, ended = ms_to_datetime(run.start_time), ms_to_datetime(run.end_time)
            yield writer.writerow(
                [run.run_uuid, _csv_safe(run.name), run.status, started.isoformat() if started else "",
                 ended.isoformat() if ended else "", _csv_safe(run.user_id_text)]
                + [_csv_safe(v) for v in cell_values(run, columns)]
            )  # fmt: skip

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    filename = re.sub(r"[^\w.-]+", "-", experiment.name).strip("-") or "runs"
    response["Content-Disposition"] = f'attachment; filename="{filename}-runs.csv"'
    return response


def series_url(run: Run, key: str) -> str:
    """The downsampled series endpoint of the API for one metric of a run (LTTB, 500 points)."""
    from urllib.parse import urlencode

    url = reverse("api:trackingrun-metric-series", kwargs={"run_uuid": run.run_uuid})
    return f"{url}?{urlencode({'key': key, 'points': 500})}"


def _as_number(value: str | float | None) -> float | None:
    """A finite float of `value`, else None (JSON has no NaN or Infinity)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@project_view(VIEW, methods=("GET",))
def run_compare(request: HttpRequest, project: Project) -> HttpResponse:
    """2–N runs side by side: overlaid metric curves, the param diff, parallel coordinates."""
    ids = [int(v) for v in request.GET.getlist("run") if v.isdigit()][:MAX_COMPARE]
    runs = list(
        Run.objects.filter(project=project, pk__in=ids)
        .select_related("experiment")
        .prefetch_related("params", "latest_metrics")
        .order_by("start_time")
    )
    for run in runs:
        decorate_run(run)
    params = {run.pk: {p.key: p.value for p in run.params.all()} for run in runs}
    metrics = {run.pk: {m.key: m for m in run.latest_metrics.all()} for run in runs}
    param_keys = sorted({k for values in params.values() for k in values})
    metric_keys = sorted({k for values in metrics.values() for k in values})
    param_rows = []
    for key in param_keys:
        values = [params[run.pk].get(key) for run in runs]
        param_rows.append({"key": key, "values": values, "differs": len(set(values)) > 1})
    metric_rows = []
    for key in metric_keys:
        points = [metrics[run.pk].get(key) for run in runs]
        metric_rows.append({"key": key, "values": [format_number(p.number) if p else None for p in points]})
    charts = [
        {"key": key, "series_json": json.dumps([{"label": str(run), "url": series_url(run, key), "index": i}
                                                for i, run in enumerate(runs) if key in metrics[run.pk]])}
        for key in metric_keys
    ]  # fmt: skip
    # Parallel coordinates: the params that differ, then every metric (numbers where all values are numbers).
    dims = []
    for row in param_rows:
        if row["differs"]:
            numeric = all(_as_number(v) is not None for v in row["values"] if v is not None)
            dims.append({"name": f"params.{row['key']}", "numeric": numeric, "source": "param", "key": row["key"]})
    dims += [{"name": f"metrics.{k}", "numeric": True, "source": "metric", "key": k} for k in metric_keys]
    parallel = {
        "dims": [{"name": d["name"], "numeric": d["numeric"]} for d in dims],
        "runs": [
            {
                "name": str(run),
                "values": [
                    (
                        (_as_number(params[run.pk].get(d["key"])) if d["numeric"] else params[run.pk].get(d["key"]))
                        if d["source"] == "param"
                        else (_as_number(metrics[run.pk][d["key"]].number) if d["key"] in metrics[run.pk] else None)
                    )
                    for d in dims
                ],
            }
            for run in runs
        ],
    }
    context = {
        "project": project,
        "runs": runs,
        "param_rows": param_rows,
        "metric_rows": metric_rows,
        "charts": charts,
        "parallel": parallel,
        "has_numbers": any(d["numeric"] for d in dims),
        "enough": len(runs) >= 2,
        "tab": "experiments",
    }
    return render(request, "models/run_compare.html", context)
