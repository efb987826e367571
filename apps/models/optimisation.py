"""What the onnx-optimise template recorded about a version it registered (docs/optimisation.md): the version it was
made from (a tag of the version) and the table of accuracy, latency and size before and after (optimisation.json, an
artifact of the run that registered it). The version page shows both."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apps.jobs.builtin_tasks.onnx_optimise import SOURCE_TAG, TABLE, VARIANT_TAG
from apps.models import artifacts
from apps.models.models import ModelVersion

MAX_TABLE_BYTES = 256 * 1024  # a table of a handful of rows; anything larger is not one the template wrote


@dataclass(frozen=True)
class Optimisation:
    """The table (columns, rows as lists of cells) and which variant the version is."""

    columns: list[str]
    rows: list[list[Any]]
    variant: str

    def rows_by_name(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=False)) for row in self.rows]


def source_version(version: ModelVersion) -> ModelVersion | None:
    """The version this one was optimised from (its tag `portal.optimised_from`, "name/number"), in its project."""
    tag = next((t for t in version.tags.all() if t.key == SOURCE_TAG), None)
    if tag is None or "/" not in tag.value:
        return None
    name, _, number = tag.value.rpartition("/")
    if not number.isdigit() or len(number) > 9:
        return None
    return (
        ModelVersion.objects.filter(
            registered_model__project_id=version.registered_model.project_id,
            registered_model__name=name,
            version=int(number),
        )
        .select_related("registered_model")
        .first()
    )


def optimised_versions(version: ModelVersion) -> list[ModelVersion]:
    """The versions the template made from this one (tagged `portal.optimised_from` "name/number"), in its project."""
    name = f"{version.registered_model.name}/{version.version}"
    return list(
        ModelVersion.objects.filter(
            registered_model__project_id=version.registered_model.project_id, tags__key=SOURCE_TAG, tags__value=name
        )
        .select_related("registered_model")
        .order_by("registered_model__name", "version")
    )


def optimisation_of(version: ModelVersion) -> Optimisation | None:
    """The optimisation table of the run that registered `version`, when that run logged one (else None, as for a
    table that is not of the template's shape)."""
    run = version.run
    if run is None or not run.artifact_uri.startswith("mlflow-artifacts:"):
        return None
    root = artifacts.clean_path(run.artifact_uri.removeprefix("mlflow-artifacts:").strip("/"))
    handle = artifacts.open_file(f"{root}/{TABLE}")
    if handle is None:
        return None
    with handle:
        raw = handle.read(MAX_TABLE_BYTES + 1)
    try:
        table = json.loads(raw) if len(raw) <= MAX_TABLE_BYTES else None
    except ValueError:
        return None
    if not isinstance(table, dict):
        return None
    columns, rows = table.get("columns"), table.get("data")
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or not isinstance(rows, list):
        return None
    if not all(isinstance(row, list) and len(row) == len(columns) for row in rows):
        return None
    variant = next((t.value for t in version.tags.all() if t.key == VARIANT_TAG), "")
    return Optimisation(columns, rows, variant)
