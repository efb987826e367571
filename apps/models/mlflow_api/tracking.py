"""MLflow tracking endpoints: experiments, runs, logging, metric history, run artifact listing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_http_methods

from apps.jobs.models import TaskRun
from apps.models import artifacts, search, services
from apps.models import metrics as metric_store
from apps.models.access import Caller
from apps.models.errors import InvalidParameter, NotFound
from apps.models.mlflow_api import serializers as s
from apps.models.mlflow_api.base import Router, json_response
from apps.models.models import Experiment, Run, RunTag
from apps.models.querysets import ACTIVE, DELETED
from apps.models.validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_BATCH_LOG_REQUEST_SIZE,
    MAX_PARAM_VAL_LENGTH,
    MAX_TAG_VAL_LENGTH,
    as_int,
    as_string,
    validate_batch_limits,
    validate_run_id,
)
from portal.lib import untrusted

router = Router()
DEFAULT_EXPERIMENT_ID = "0"


# --- Lookups: 404 outside the caller's projects, 403 for writes without the right --------------------


def get_experiment(caller: Caller, experiment_id: Any, *, write: bool = False) -> Experiment:
    if experiment_id is None or experiment_id == "":
        raise InvalidParameter("Missing value for required parameter 'experiment_id'.")
    if str(experiment_id) == DEFAULT_EXPERIMENT_ID:
        project = caller.project
        if project is None:
            raise NotFound("No Experiment with id=0 exists: this token is not limited to a project.")
        caller.check(project.pk, write=write)
        return services.default_experiment(project)
    try:
        pk = int(str(experiment_id))
    except ValueError:
        raise InvalidParameter(
            f"Invalid experiment ID '{experiment_id}'. Experiment ID must be a valid integer."
        ) from None
    experiment = Experiment.objects.filter(pk=pk).first()
    if experiment is None or experiment.project_id not in caller.visible:
        raise NotFound(f"No Experiment with id={experiment_id} exists")
    if write:
        caller.check_write(experiment.project_id)
    return experiment


def get_run(caller: Caller, data: dict, *, write: bool = False) -> Run:
    run_id = validate_run_id(data.get("run_id") or data.get("run_uuid"))
    run = next(iter(Run.objects.filter(run_uuid=run_id)[:1]), None)  # unique: no ORDER BY to compile or run
    if run is None or run.project_id not in caller.visible:
        raise NotFound(f"Run with id={run_id} not found")
    if write:
        caller.check_write(run.project_id)
    return run


def _pairs(items: Any, path: str) -> list[tuple[str, str]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise InvalidParameter(f"Invalid value for parameter '{path}': expected a list.")
    result = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidParameter(f"Invalid value {item!r} for parameter '{path}[{index}]' supplied.")
        result.append((item.get("key"), as_string(item.get("value"), f"{path}[{index}].value")))
    return result


def _max_results(data: dict, default: int, limit: int) -> int:
    value = as_int(data.get("max_results"), "max_results", default=default)
    if not 1 <= value <= limit:
        raise InvalidParameter(
            f"Invalid value {value} for parameter 'max_results' supplied. It must be between 1 and {limit}."
        )
    return value


def _order_by(data: dict) -> list[str]:
    value = data.get("order_by") or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidParameter("Invalid value for parameter 'order_by': expected a list of strings.")
    return value


# --- Experiments -----------------------------------------------------------------------------------------


@router.route("POST", "experiments/create")
def create_experiment(caller: Caller, data: dict, _kw: dict) -> dict:
    name = as_string(data.get("name"), "name", required=True)
    project, bare = caller.split_name(name, write=True)
    tags = _pairs(data.get("tags"), "tags")
    experiment = services.create_experiment(project, bare, tags)
    return {"experiment_id": str(experiment.pk)}


@router.route("GET", "experiments/get")
def get_experiment_view(caller: Caller, data: dict, _kw: dict) -> dict:
    return {"experiment": s.experiment_json(caller, get_experiment(caller, data.get("experiment_id")))}


@router.route("GET", "experiments/get-by-name")
def get_experiment_by_name(caller: Caller, data: dict, _kw: dict) -> dict:
    name = as_string(data.get("experiment_name"), "experiment_name", required=True)
    project, bare = caller.split_name(name)
    experiment = Experiment.objects.filter(project=project, name=bare).first()
    if experiment is None:
        raise NotFound(f"Could not find experiment with name '{name}'")
    return {"experiment": s.experiment_json(caller, experiment)}


@router.route("POST", "experiments/search")
@router.route("GET", "experiments/search")
def search_experiments(caller: Caller, data: dict, _kw: dict) -> dict:
    max_results = _max_results(data, 1000, 50000)
    qs = Experiment.objects.filter(project_id__in=list(caller.visible))
    if caller.project is not None:
        qs = qs.filter(project_id=caller.project.pk)
    qs = search.filter_experiments(qs.view_type(data.get("view_type")), data.get("filter"), _order_by(data))
    token = data.get("page_token")
    offset = metric_store.decode_offset(token)
    page = list(qs[offset : offset + max_results + 1])
    result: dict[str, Any] = {"experiments": s.experiments_json(caller, page[:max_results])}
    if len(page) > max_results:
        result["next_page_token"] = metric_store.encode_token({"offset": offset + max_results})
    return result


@router.route("POST", "experiments/update")
def update_experiment(caller: Caller, data: dict, _kw: dict) -> dict:
    experiment = get_experiment(caller, data.get("experiment_id"), write=True)
    new_name = as_string(data.get("new_name"), "new_name", required=True)
    if caller.project is None:
        project, new_name = caller.split_name(new_name, write=True)
        if project.pk != experiment.project_id:
            raise InvalidParameter("An experiment cannot move to another project.")
    elif new_name.startswith(f"{caller.project.slug}/"):
        new_name = new_name[len(caller.project.slug) + 1 :]
    services.rename_experiment(experiment, new_name)
    return {}


@router.route("POST", "experiments/delete")
def delete_experiment(caller: Caller, data: dict, _kw: dict) -> dict:
    services.set_experiment_lifecycle(get_experiment(caller, data.get("experiment_id"), write=True), DELETED)
    return {}


@router.route("POST", "experiments/restore")
def restore_experiment(caller: Caller, data: dict, _kw: dict) -> dict:
    services.set_experiment_lifecycle(get_experiment(caller, data.get("experiment_id"), write=True), ACTIVE)
    return {}


@router.route("POST", "experiments/set-experiment-tag")
def set_experiment_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    experiment = get_experiment(caller, data.get("experiment_id"), write=True)
    services.set_experiment_tag(experiment, data.get("key"), as_string(data.get("value"), "value"))
    return {}


@router.route("POST", "experiments/delete-experiment-tag")
def delete_experiment_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    experiment = get_experiment(caller, data.get("experiment_id"), write=True)
    services.delete_experiment_tag(experiment, as_string(data.get("key"), "key", required=True))
    return {}


# --- Runs ----------------------------------------------------------------------------------------------------


def _source_task(caller: Caller) -> Any:
    if caller.token is None:
        return None
    return TaskRun.objects.filter(api_token=caller.token).first()


@router.route("POST", "runs/create")
def create_run(caller: Caller, data: dict, _kw: dict) -> dict:
    experiment = get_experiment(caller, data.get("experiment_id") or DEFAULT_EXPERIMENT_ID, write=True)
    run = services.create_run(
        experiment,
        user=caller.user,
        user_id=as_string(data.get("user_id"), "user_id", max_length=Run._meta.get_field("user_id_text").max_length),
        run_name=as_string(data.get("run_name"), "run_name"),
        start_time=as_int(data.get("start_time"), "start_time"),
        tags=_pairs(data.get("tags"), "tags"),
        source_task=_source_task(caller),
    )
    return {"run": s.runs_json([run])[0]}


@router.route("GET", "runs/get")
def get_run_view(caller: Caller, data: dict, _kw: dict) -> dict:
    return {"run": s.runs_json([get_run(caller, data)])[0]}


@router.route("POST", "runs/update")
def update_run(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data, write=True)
    services.update_run(
        run,
        status=as_string(data.get("status"), "status") or None,
        end_time=as_int(data.get("end_time"), "end_time"),
        run_name=as_string(data.get("run_name"), "run_name") or None,
    )
    return {"run_info": s.run_info(run)}


@router.route("POST", "runs/delete")
def delete_run(caller: Caller, data: dict, _kw: dict) -> dict:
    services.set_run_lifecycle(get_run(caller, data, write=True), DELETED)
    return {}


@router.route("POST", "runs/restore")
def restore_run(caller: Caller, data: dict, _kw: dict) -> dict:
    services.set_run_lifecycle(get_run(caller, data, write=True), ACTIVE)
    return {}


@router.route("POST", "runs/search")
@router.route("GET", "runs/search")
def search_runs(caller: Caller, data: dict, _kw: dict) -> HttpResponse:
    ids = data.get("experiment_ids") or []
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list):
        raise InvalidParameter("Invalid value for parameter 'experiment_ids': expected a list.")
    experiment_pks = []
    for value in ids:
        if str(value) == DEFAULT_EXPERIMENT_ID:
            if caller.project is not None and caller.project.pk in caller.visible:
                experiment_pks.append(services.default_experiment(caller.project).pk)
            continue
        try:
            pk = int(str(value))
            if not INT64_MIN <= pk <= INT64_MAX:  # no row has it, and SQLite cannot even bind it
                raise ValueError
        except ValueError:
            raise InvalidParameter(f"Invalid experiment ID '{value}'. Experiment ID must be a valid integer.") from None
        experiment_pks.append(pk)
    qs = Run.objects.filter(experiment_id__in=experiment_pks, project_id__in=list(caller.visible))
    qs = qs.view_type(data.get("run_view_type"))
    runs, token = search.search_runs(
        qs,
        filter_string=data.get("filter"),
        order_by=_order_by(data),
        max_results=_max_results(data, 1000, 50000),
        page_token=data.get("page_token") or None,
        columns=s.RUN_COLUMNS,
    )
    result: dict[str, Any] = {"runs": s.run_rows_json(runs)}
    if token:
        result["next_page_token"] = token
    return s.fast_json_response(result)


def _logged_fast(caller: Caller, data: dict, points: Callable[[], list]) -> bool:
    """The points of a metrics-only call stored in one round trip (`services.log_metrics_by_run_id`) when the run
    is an active one of a project the caller may write to. Anything else (a bad value, a missing or foreign run,
    a read-only token) returns False having written nothing, and the ordinary path answers with its error, in its
    order (the run's 404 before a value's 400)."""
    if caller.read_only:
        return False
    try:
        run_id = validate_run_id(data.get("run_id") or data.get("run_uuid"))
        parsed = points()
    except InvalidParameter:
        return False
    return services.log_metrics_by_run_id(run_id, caller.writable, parsed)


@router.route("POST", "runs/log-metric")
def log_metric(caller: Caller, data: dict, _kw: dict) -> dict:
    if _logged_fast(caller, data, lambda: [services.parse_metric(data, "")]):
        return {}
    run = get_run(caller, data, write=True)
    services.log_batch(run, metrics=[services.parse_metric(data, "")])
    return {}


@router.route("POST", "runs/log-parameter")
def log_param(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data, write=True)
    pair = services.parse_pair(
        {"key": data.get("key"), "value": data.get("value")}, "param", "Param", MAX_PARAM_VAL_LENGTH
    )
    services.log_batch(run, params=[pair])
    return {}


@router.route("POST", "runs/set-tag")
def set_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data, write=True)
    pair = services.parse_pair({"key": data.get("key"), "value": data.get("value")}, "tag", "Tag", MAX_TAG_VAL_LENGTH)
    services.log_batch(run, tags=[pair])
    return {}


@router.route("POST", "runs/delete-tag")
def delete_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data, write=True)
    services.delete_tag(run, as_string(data.get("key"), "key", required=True))
    return {}


@router.route("POST", "runs/log-batch", max_bytes=MAX_BATCH_LOG_REQUEST_SIZE)
def log_batch(caller: Caller, data: dict, _kw: dict) -> dict:
    if not data.get("params") and not data.get("tags") and _logged_fast(caller, data, lambda: _batch_points(data)):
        return {}  # `log_metrics`: a few metrics and nothing else
    run = get_run(caller, data, write=True)
    raw = {name: data.get(name) or [] for name in ("metrics", "params", "tags")}
    for name, items in raw.items():
        if not isinstance(items, list):
            raise InvalidParameter(f"Invalid value for parameter '{name}': expected a list.")
    validate_batch_limits(len(raw["metrics"]), len(raw["params"]), len(raw["tags"]))
    services.log_batch(
        run,
        metrics=[services.parse_metric(m, f"metrics[{i}]") for i, m in enumerate(raw["metrics"])],
        params=[
            services.parse_pair(p, f"params[{i}]", "Param", MAX_PARAM_VAL_LENGTH) for i, p in enumerate(raw["params"])
        ],
        tags=[services.parse_pair(t, f"tags[{i}]", "Tag", MAX_TAG_VAL_LENGTH) for i, t in enumerate(raw["tags"])],
    )
    return {}


def _batch_points(data: dict) -> list:
    metrics = data.get("metrics")
    if not isinstance(metrics, list) or not metrics or len(metrics) > metric_store.SMALL_BATCH:
        raise InvalidParameter("not for the one-statement path")  # the ordinary path checks and answers
    return [services.parse_metric(m, f"metrics[{i}]") for i, m in enumerate(metrics)]


@router.route("POST", "runs/log-inputs")
def log_inputs(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data, write=True)
    datasets = data.get("datasets") or []
    if not isinstance(datasets, list):
        raise InvalidParameter("Invalid value for parameter 'datasets': expected a list.")
    services.log_inputs(run, datasets)
    return {}


@router.route("POST", "runs/log-model")
def log_model(caller: Caller, data: dict, _kw: dict) -> dict:
    """MLflow 2's record of a logged model: appended to the run's `mlflow.log-model.history` tag."""
    run = get_run(caller, data, write=True)
    model_json = as_string(data.get("model_json"), "model_json", required=True)
    try:
        entry = untrusted.loads(model_json)
    except untrusted.UnsafeInput as exc:
        raise InvalidParameter(f"Invalid value for parameter 'model_json': {exc}") from None
    except ValueError:
        raise InvalidParameter("Invalid value for parameter 'model_json': not JSON.") from None
    tag = RunTag.objects.filter(run=run, key="mlflow.log-model.history").first()
    history = json.loads(tag.value) if tag and tag.value.startswith("[") else []
    history.append(entry)
    services.log_batch(run, tags=[("mlflow.log-model.history", json.dumps(history))])
    return {}


@router.route("POST", "runs/outputs")
def log_outputs(caller: Caller, data: dict, _kw: dict) -> dict:
    get_run(caller, data, write=True)  # model outputs are linked through the logged model's source run
    return {}


# --- Metrics -------------------------------------------------------------------------------------------------


@router.route("GET", "metrics/get-history")
def get_metric_history(caller: Caller, data: dict, _kw: dict) -> HttpResponse:
    run = get_run(caller, data)
    key = as_string(data.get("metric_key"), "metric_key", required=True)
    max_results = as_int(data.get("max_results"), "max_results")
    rows, token = metric_store.history_page(run.pk, key, max_results, data.get("page_token") or None)
    body = '{"metrics":[' + ",".join(metric_store.history_json(key, rows)) + "]"
    if token:
        body += f',"next_page_token":"{token}"'
    return HttpResponse(body + "}", content_type="application/json")


@router.route("GET", "metrics/get-history-bulk-interval")
def get_history_bulk_interval(caller: Caller, data: dict, _kw: dict) -> dict:
    """Up to `max_results` evenly spaced points per run (the UI's charts), first and last steps included."""
    run_ids = data.get("run_ids") or []
    if isinstance(run_ids, str):
        run_ids = [run_ids]
    key = as_string(data.get("metric_key"), "metric_key", required=True)
    max_results = _max_results(data, 320, 2500)
    start = as_int(data.get("start_step"), "start_step")
    end = as_int(data.get("end_step"), "end_step")
    points = []
    for run_id in run_ids[:100]:
        run = get_run(caller, {"run_id": run_id})
        qs = run.metrics.filter(key=key)
        if start is not None:
            qs = qs.filter(step__gte=start)
        if end is not None:
            qs = qs.filter(step__lte=end)
        rows = list(qs.order_by("step", "timestamp", "id").values_list("step", "timestamp", "value", "is_nan"))
        if len(rows) > max_results:
            stride = (len(rows) - 1) / (max_results - 1)
            rows = [rows[round(i * stride)] for i in range(max_results)]
        for step, timestamp, value, is_nan in rows:
            points.append(
                {"key": key, "value": s.metric_value(value, is_nan), "timestamp": timestamp, "step": step,
                 "run_id": run.run_uuid}
            )  # fmt: skip
    return {"metrics": points}


# --- Server capabilities ---------------------------------------------------------------------------------

SERVER_INFO = {
    "store_type": None,  # MLflow names its FileStore or SqlStore here (its telemetry reads it); we are neither
    "workspaces_enabled": False,
    "trace_archival_enabled": False,
    # mlflow-artifacts/mpu/… and presigned uploads are not implemented: the client then uploads in one PUT
    "multipart_uploads_enabled": False,
    "multipart_downloads_enabled": False,
    "presigned_upload_run_id_supported": False,
    "presigned_upload_model_id_supported": False,
    "features_enabled": {"gateway": False},
}


@require_http_methods(["GET", "HEAD", "OPTIONS"])
def server_info(request: HttpRequest) -> HttpResponse:
    """`/api/3.0/mlflow/server-info`, the probe of MLflow 3 clients (multipart artifacts, workspaces, telemetry).

    Public, as MLflow's own: clients ask before they authenticate, and it holds nothing of a tenant.
    """
    return json_response(SERVER_INFO)


# --- Run artifacts (listing through the tracking API) -----------------------------------------------------


@router.route("GET", "artifacts/list")
def list_run_artifacts(caller: Caller, data: dict, _kw: dict) -> dict:
    run = get_run(caller, data)
    sub = artifacts.clean_path(data.get("path"))
    root = run.artifact_uri.removeprefix("mlflow-artifacts:/")
    base = f"{root}/{sub}" if sub else root
    files = [
        {**entry, "path": f"{sub}/{entry['path']}" if sub else entry["path"]} for entry in artifacts.list_dir(base)
    ]
    return {"root_uri": run.artifact_uri, "files": files}
