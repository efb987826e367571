"""MLflow's JSON shapes (protobuf JSON: snake_case, int64 as numbers, ids as strings) of our models.

Runs are serialised in bulk: one query per kind of child (latest metrics, params, tags, inputs) per page.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import orjson
from django.db import connection
from django.http import HttpResponse

from apps.models.access import Caller
from apps.models.models import (
    Experiment,
    ExperimentTag,
    LatestMetric,
    LoggedModel,
    ModelAlias,
    ModelVersion,
    ModelVersionTag,
    Param,
    RegisteredModel,
    RegisteredModelTag,
    Run,
    RunInput,
    RunTag,
)
from portal.lib import jsonsafe
from portal.lib.jsonsafe import finite_float


def fast_json_response(payload: dict) -> HttpResponse:
    """`payload` as `base.json_response` writes it, through orjson (a search page of 2,500 runs: ~18 ms in the
    standard library's encoder, ~3 ms here). The payload's floats are already finite (`metric_value`); anything
    orjson refuses (an integer past 64 bits in a dataset's JSON tags) goes the standard library's way."""
    try:
        body = orjson.dumps(payload)
    except TypeError:
        body = jsonsafe.dumps(payload, separators=(",", ":"), default=str).encode()
    return HttpResponse(body, content_type="application/json")


def metric_value(value: float, is_nan: bool) -> float | str:
    """A stored metric value as protobuf JSON has doubles (NaN and ±Infinity as strings)."""
    return "NaN" if is_nan else finite_float(value)


def experiment_json(caller: Caller, experiment: Experiment, tags: list[tuple[str, str]] | None = None) -> dict:
    if tags is None:
        tags = list(ExperimentTag.objects.filter(experiment=experiment).values_list("key", "value"))
    return {
        "experiment_id": str(experiment.pk),
        "name": caller.display_name(experiment.project_id, experiment.name),
        "artifact_location": experiment.artifact_location,
        "lifecycle_stage": experiment.lifecycle_stage,
        "creation_time": experiment.creation_time,
        "last_update_time": experiment.last_update_time,
        "tags": [{"key": k, "value": v} for k, v in tags],
    }


def experiments_json(caller: Caller, experiments: Sequence[Experiment]) -> list[dict]:
    tags: dict[int, list] = defaultdict(list)
    for exp_id, key, value in ExperimentTag.objects.filter(experiment__in=experiments).values_list(
        "experiment_id", "key", "value"
    ):
        tags[exp_id].append((key, value))
    return [experiment_json(caller, e, tags[e.pk]) for e in experiments]


# The run columns a response needs, in `run_row`'s order (search reads only these, as tuples, not model instances).
RUN_COLUMNS = (
    "pk", "run_uuid", "name", "experiment_id", "user_id_text", "status", "start_time", "end_time", "artifact_uri",
    "lifecycle_stage",
)  # fmt: skip


def run_row(run: Run) -> tuple:
    """`run`'s `RUN_COLUMNS`."""
    return (
        run.pk, run.run_uuid, run.name, run.experiment_id, run.user_id_text, run.status, run.start_time, run.end_time,
        run.artifact_uri, run.lifecycle_stage,
    )  # fmt: skip


def _info(row: tuple) -> dict:
    _pk, run_uuid, name, experiment_id, user_id, status, start_time, end_time, artifact_uri, lifecycle_stage = row
    info = {
        "run_id": run_uuid,
        "run_uuid": run_uuid,
        "run_name": name,
        "experiment_id": str(experiment_id),
        "user_id": user_id,
        "status": status,
        "start_time": start_time,
        "artifact_uri": artifact_uri,
        "lifecycle_stage": lifecycle_stage,
    }
    if end_time is not None:
        info["end_time"] = end_time
    return info


def run_info(run: Run) -> dict:
    return _info(run_row(run))


def _children(table: str, columns: str, id_list: str) -> list[tuple]:
    """Rows of a child table for a page of runs. The ids are our own integers, inlined (`_id_list`): Django's
    per-parameter preparation of a 5,000-element IN list cost more than the query itself."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT run_id, {columns} FROM {table} WHERE run_id IN ({id_list})")
        return cursor.fetchall()


def _id_list(ids: list[int]) -> str:
    return ",".join(map(str, map(int, ids)))


def runs_json(runs: Sequence[Run]) -> list[dict]:
    """Full runs (info, data, inputs) with one query per kind of child for the whole page."""
    return run_rows_json([run_row(run) for run in runs])


def run_rows_json(rows: Sequence[tuple]) -> list[dict]:
    """Full runs of `RUN_COLUMNS` rows: one query per kind of child (latest metrics, params, tags, inputs) for the
    whole page, whatever its size. A search page is thousands of runs: no model instances, and no call per child row
    unless its value is NaN or infinite."""
    ids = [row[0] for row in rows]
    metrics: dict[int, list] = {pk: [] for pk in ids}
    params: dict[int, list] = {pk: [] for pk in ids}
    tags: dict[int, list] = {pk: [] for pk in ids}
    inputs: dict[int, list] = {pk: [] for pk in ids}
    if ids:
        id_list = _id_list(ids)  # once for the four statements
        columns = '"key", "value", "timestamp", "step", "is_nan"'
        isfinite = math.isfinite
        for run_id, key, value, timestamp, step, is_nan in _children(LatestMetric._meta.db_table, columns, id_list):
            if is_nan or not isfinite(value):
                value = metric_value(value, bool(is_nan))
            metrics[run_id].append({"key": key, "value": value, "timestamp": timestamp, "step": step})
        for run_id, key, value in _children(Param._meta.db_table, '"key", "value"', id_list):
            params[run_id].append({"key": key, "value": value})
        for run_id, key, value in _children(RunTag._meta.db_table, '"key", "value"', id_list):
            tags[run_id].append({"key": key, "value": value})
        input_ids = [row[1] for row in _children(RunInput._meta.db_table, "id", id_list)]
        for item in RunInput.objects.filter(pk__in=input_ids) if input_ids else []:
            inputs[item.run_id].append(dataset_input_json(item))
    return [
        {
            "info": _info(row),
            "data": {"metrics": metrics[row[0]], "params": params[row[0]], "tags": tags[row[0]]},
            "inputs": {"dataset_inputs": inputs[row[0]]},
        }
        for row in rows
    ]


def dataset_input_json(item: RunInput) -> dict:
    dataset = {"name": item.name, "digest": item.digest, "source_type": item.source_type, "source": item.source}
    if item.schema:
        dataset["schema"] = item.schema
    if item.profile:
        dataset["profile"] = item.profile
    return {"tags": [{"key": k, "value": v} for k, v in item.tags.items()], "dataset": dataset}


def logged_model_json(logged: LoggedModel) -> dict:
    info: dict[str, Any] = {
        "model_id": logged.model_id,
        "experiment_id": str(logged.experiment_id),
        "name": logged.name,
        "artifact_uri": logged.artifact_location,
        "creation_timestamp_ms": logged.creation_timestamp,
        "last_updated_timestamp_ms": logged.last_updated_timestamp,
        "status": logged.status,
        "status_message": logged.status_message,
        "model_type": logged.model_type,
        "tags": [{"key": t.key, "value": t.value} for t in logged.tags.all()],
    }
    if logged.source_run_id is not None:
        info["source_run_id"] = logged.source_run.run_uuid
    return {"info": info, "data": {"params": [{"key": p.key, "value": p.value} for p in logged.params.all()]}}


def model_version_json(caller: Caller, version: ModelVersion, model: RegisteredModel | None = None) -> dict:
    model = model or version.registered_model
    data: dict[str, Any] = {
        "name": caller.display_name(model.project_id, model.name),
        "version": str(version.version),
        "creation_timestamp": version.creation_timestamp,
        "last_updated_timestamp": version.last_updated_timestamp,
        "user_id": version.user_id_text,
        "current_stage": version.stage,
        "description": version.description,
        "source": version.source,
        "status": version.status,
        "status_message": version.status_message,
        "run_link": version.run_link,
        "tags": [
            {"key": k, "value": v}
            for k, v in ModelVersionTag.objects.filter(model_version=version).values_list("key", "value")
        ],
        "aliases": list(ModelAlias.objects.filter(model_version=version).values_list("alias", flat=True)),
    }
    if version.run_id is not None:
        data["run_id"] = Run.objects.filter(pk=version.run_id).values_list("run_uuid", flat=True).first() or ""
    if version.model_id:
        data["model_id"] = version.model_id
    return data


def registered_model_json(caller: Caller, model: RegisteredModel, *, latest: bool = True) -> dict:
    data: dict[str, Any] = {
        "name": caller.display_name(model.project_id, model.name),
        "creation_timestamp": model.creation_timestamp,
        "last_updated_timestamp": model.last_updated_timestamp,
        "description": model.description,
        "tags": [
            {"key": k, "value": v}
            for k, v in RegisteredModelTag.objects.filter(registered_model=model).values_list("key", "value")
        ],
        "aliases": [
            {"alias": alias, "version": str(number)}
            for alias, number in ModelAlias.objects.filter(registered_model=model).values_list(
                "alias", "model_version__version"
            )
        ],
    }
    if latest:
        data["latest_versions"] = [model_version_json(caller, v, model) for v in latest_versions(model)]
    return data


def latest_versions(model: RegisteredModel, stages: list[str] | None = None) -> list[ModelVersion]:
    """The newest version in each stage (MLflow's get-latest-versions)."""
    by_stage: dict[str, ModelVersion] = {}
    for version in ModelVersion.objects.filter(registered_model=model).order_by("-version"):
        by_stage.setdefault(version.stage, version)
    wanted = {s.lower() for s in stages} if stages else None
    return [v for s, v in by_stage.items() if wanted is None or s.lower() in wanted]
