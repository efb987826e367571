"""The two sides of a drift comparison: the reference (a dataset version, found through lineage) and the window (the
inputs a service logged), each as {feature name: [values]}."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import orjson
from django.utils.translation import gettext as _

from apps.datasets.analysis import TABULAR, extension, table_rows
from apps.datasets.models import Dataset, DatasetVersion
from apps.models.lineage import trained_on
from apps.serving.console import served_version
from apps.serving.models import InferenceService, PayloadLog

MAX_REFERENCE_ROWS = 100_000
MAX_WINDOW_REQUESTS = 20_000


class NoReference(Exception):
    """No reference data can be found (the message says why)."""


# --- lineage -----------------------------------------------------------------------------------------------------


def reference_of(monitor: Any) -> DatasetVersion:
    """The monitor's reference: its explicit version, else model version → tracking run → dataset version."""
    if monitor.reference_version_id:
        return monitor.reference_version
    version = served_version(monitor.service)
    if version is None:
        raise NoReference(_("The service serves no registered model version, so its training data is unknown."))
    if version.run_id is None:
        raise NoReference(_("Model version %(v)s has no tracking run: choose a reference dataset version.") % {
            "v": version.version})  # fmt: skip
    found = trained_on(version.run)
    if found is None:
        raise NoReference(
            _("The run of model version %(v)s records no dataset version it trained on: choose one.") % {
                "v": version.version}
        )  # fmt: skip
    return found


# --- reference ---------------------------------------------------------------------------------------------------


def reference_table(version: DatasetVersion, target: str = "") -> tuple[list[str], dict[str, list[Any]]]:
    """(feature columns in order, {column: values}) of the version's first table file, up to MAX_REFERENCE_ROWS
    rows; `target` (the label column) left out."""
    files = [f for f in version.files.select_related("blob").order_by("path") if extension(f.path) in TABULAR]
    if not files:
        raise NoReference(_("Dataset version %(ref)s has no table file (CSV, TSV, JSONL or Parquet).") % {
            "ref": version.ref})  # fmt: skip
    header, rows = table_rows(files[0].path, files[0].blob_id)
    columns: dict[str, list[Any]] = {name: [] for name in header}
    for count, row in enumerate(rows):
        if count >= MAX_REFERENCE_ROWS:
            break
        for name, value in zip(header, row, strict=False):
            columns[name].append(value)
    features = [name for name in header if name != target]
    return features, {name: columns[name] for name in features}


# --- the window --------------------------------------------------------------------------------------------------


def _tensor_columns(tensor: dict[str, Any]) -> list[list[Any]] | None:
    """A V2 tensor as columns of values (a [n] or [n, 1] tensor is one column, [n, k] is k)."""
    shape, data = tensor.get("shape"), tensor.get("data")
    if not isinstance(shape, list) or not shape or not isinstance(data, list):
        return None
    try:
        flat = np.asarray(data, dtype=object).reshape(-1)
    except ValueError:  # ragged nesting: not a tensor
        return None
    rows = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else 1
    if not len(flat) or len(flat) % rows:
        return None
    table = flat.reshape(rows, len(flat) // rows)
    return [list(table[:, j]) for j in range(table.shape[1])]


def request_features(body: dict[str, Any], names: list[str]) -> dict[str, list[Any]]:
    """The features of one Open Inference Protocol request: a tensor of one column is the feature of its name; the
    columns of a 2-D tensor take the reference's feature names in order (`<tensor>[j]` past them)."""
    out: dict[str, list[Any]] = {}
    inputs = body.get("inputs") if isinstance(body, dict) else None
    if not isinstance(inputs, list):
        return out
    for tensor in inputs:
        if not isinstance(tensor, dict):
            continue
        columns = _tensor_columns(tensor)
        if columns is None:
            continue
        name = str(tensor.get("name", ""))
        if len(columns) == 1 and (name in names or len(inputs) > 1):
            out.setdefault(name, []).extend(columns[0])
            continue
        for j, column in enumerate(columns):
            out.setdefault(names[j] if j < len(names) else f"{name}[{j}]", []).extend(column)
    return out


def window(service: InferenceService, since: datetime, names: list[str]) -> tuple[dict[str, list[Any]], int]:
    """({feature: values}, rows) of the inputs the service logged since `since` (answered 2xx, body kept)."""
    logs = (
        PayloadLog.objects.filter(service=service, created_at__gte=since, status__lt=300)
        .exclude(request="")
        .order_by("-created_at")
        .values_list("request", flat=True)[:MAX_WINDOW_REQUESTS]
    )
    out: dict[str, list[Any]] = {}
    for text in logs:
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        for name, values in request_features(body, names).items():
            out.setdefault(name, []).extend(values)
    rows = max((len(v) for v in out.values()), default=0)
    return out, rows


def dataset_choices(project: Any) -> list[tuple[int, str]]:
    """(pk, "name@number") of the project's dataset versions, newest first, for the form."""
    versions = DatasetVersion.objects.filter(dataset__in=Dataset.objects.filter(project=project))
    return [(v.pk, v.ref) for v in versions.select_related("dataset").order_by("dataset__name", "-number")[:500]]
