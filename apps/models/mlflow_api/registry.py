"""MLflow model registry endpoints (registered models, versions, aliases) and MLflow 3's logged models."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Model, QuerySet

from apps.models import artifacts, registry, search
from apps.models import metrics as metric_store
from apps.models.access import Caller
from apps.models.errors import InvalidParameter, NotFound
from apps.models.mlflow_api import serializers as s
from apps.models.mlflow_api.base import Router
from apps.models.mlflow_api.tracking import _max_results, _order_by, _pairs, get_experiment, get_run
from apps.models.models import LoggedModel, ModelVersion, RegisteredModel
from apps.models.validation import as_string

router = Router()


def get_model(caller: Caller, name: Any, *, write: bool = False) -> RegisteredModel:
    name = as_string(name, "name", required=True)
    project, bare = caller.split_name(name)
    model = RegisteredModel.objects.filter(project=project, name=bare).first()
    if model is None:
        raise NotFound(f"Registered Model with name={name} not found")
    if write:
        caller.check_write(model.project_id)
    return model


def _max(model: type[Model], field: str) -> int:
    """The length of a text column (a longer value is refused by the database: a 500)."""
    return model._meta.get_field(field).max_length


def _paged(qs: QuerySet, data: dict, default: int, limit: int) -> tuple[list, str]:
    max_results = _max_results(data, default, limit)
    token = data.get("page_token")
    offset = metric_store.decode_offset(token)
    page = list(qs[offset : offset + max_results + 1])
    next_token = metric_store.encode_token({"offset": offset + max_results}) if len(page) > max_results else ""
    return page[:max_results], next_token


def _filter(
    qs: QuerySet, text: str | None, strings: dict[str, str], numbers: dict[str, str], tag_path: str
) -> QuerySet:
    """`name = 'x'`, `name LIKE 'x%'`, `run_id = '…'`, `tags.k = 'v'` … joined with AND."""
    text = (text or "").strip()
    names = "|".join(re.escape(n) for n in [*strings, *numbers])
    text = re.sub(rf"(?<![\w.`\"])({names})(?=\s*(=|!=|<|>|LIKE|ILIKE|IN|NOT))", r"attributes.\1", text, flags=re.I)
    tags = qs.model._meta.get_field(tag_path)  # the reverse relation to the tag rows
    owner = tags.field.attname
    selects, absent = [], []
    for clause in search.parse_filter(text, strings, numbers):
        if clause.entity == "tag" and clause.comparator == "IS NULL":
            absent.append(tags.related_model.objects.filter(key=clause.key).values(owner))
        elif clause.entity == "tag":
            selects.append(search.key_value_rows(tags.related_model, clause, owner))
        elif clause.entity == "attribute":
            field = strings.get(clause.key) or numbers[clause.key]
            value = clause.value if clause.key in strings else int(clause.value)
            qs = qs.filter(search.value_q(field, clause.comparator, value))
        else:
            raise InvalidParameter(f"Invalid filter: {clause.entity} '{clause.key}' is not supported here.")
    return search.narrow_by_rows(qs, selects, absent)


def _scope(caller: Caller, qs: QuerySet, path: str = "project_id") -> QuerySet:
    qs = qs.filter(**{f"{path}__in": list(caller.visible)})
    if caller.project is not None:
        qs = qs.filter(**{path: caller.project.pk})
    return qs


# --- Registered models -----------------------------------------------------------------------------------


@router.route("POST", "registered-models/create")
def create_registered_model(caller: Caller, data: dict, _kw: dict) -> dict:
    project, bare = caller.split_name(as_string(data.get("name"), "name", required=True), write=True)
    model = registry.create_registered_model(
        project,
        bare,
        description=as_string(data.get("description"), "description"),
        tags=_pairs(data.get("tags"), "tags"),
    )
    return {"registered_model": s.registered_model_json(caller, model)}


@router.route("GET", "registered-models/get")
def get_registered_model(caller: Caller, data: dict, _kw: dict) -> dict:
    return {"registered_model": s.registered_model_json(caller, get_model(caller, data.get("name")))}


@router.route("POST", "registered-models/rename")
def rename_registered_model(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    project, new_name = caller.split_name(as_string(data.get("new_name"), "new_name", required=True), write=True)
    if project.pk != model.project_id:
        raise InvalidParameter("A registered model cannot move to another project.")
    registry.rename_registered_model(model, new_name)
    return {"registered_model": s.registered_model_json(caller, model)}


@router.route("PATCH", "registered-models/update")
def update_registered_model(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    description = data.get("description")
    registry.update_registered_model(model, None if description is None else str(description))
    return {"registered_model": s.registered_model_json(caller, model)}


@router.route("DELETE", "registered-models/delete")
def delete_registered_model(caller: Caller, data: dict, _kw: dict) -> dict:
    registry.delete_registered_model(get_model(caller, data.get("name"), write=True))
    return {}


@router.route("GET", "registered-models/search")
@router.route("POST", "registered-models/search")
def search_registered_models(caller: Caller, data: dict, _kw: dict) -> dict:
    qs = _scope(caller, RegisteredModel.objects.all())
    qs = _filter(qs, data.get("filter"), {"name": "name"}, {}, "tags")
    ordering = []
    for item in _order_by(data):
        _entity, key, ascending = search.parse_order_by(item)
        field = {"name": "name", "timestamp": "last_updated_timestamp", "last_updated_timestamp":
                 "last_updated_timestamp", "creation_timestamp": "creation_timestamp"}.get(key)  # fmt: skip
        if field is None:
            raise InvalidParameter(f"Invalid order_by clause '{item}'.")
        ordering.append(field if ascending else f"-{field}")
    page, token = _paged(qs.order_by(*ordering, "name", "pk"), data, 100, 1000)
    result: dict[str, Any] = {"registered_models": [s.registered_model_json(caller, m) for m in page]}
    if token:
        result["next_page_token"] = token
    return result


@router.route("POST", "registered-models/get-latest-versions")
@router.route("GET", "registered-models/get-latest-versions")
def get_latest_versions(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"))
    stages = data.get("stages") or None
    return {"model_versions": [s.model_version_json(caller, v, model) for v in s.latest_versions(model, stages)]}


@router.route("POST", "registered-models/set-tag")
def set_registered_model_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    registry.set_registered_model_tag(model, data.get("key"), as_string(data.get("value"), "value"))
    return {}


@router.route("DELETE", "registered-models/delete-tag")
def delete_registered_model_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    registry.delete_registered_model_tag(model, as_string(data.get("key"), "key", required=True))
    return {}


@router.route("POST", "registered-models/alias")
def set_alias(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    registry.set_alias(model, data.get("alias"), data.get("version"))
    return {}


@router.route("DELETE", "registered-models/alias")
def delete_alias(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    registry.delete_alias(model, as_string(data.get("alias"), "alias", required=True))
    return {}


@router.route("GET", "registered-models/alias")
def get_by_alias(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"))
    version = registry.version_by_alias(model, as_string(data.get("alias"), "alias", required=True))
    return {"model_version": s.model_version_json(caller, version, model)}


# --- Model versions ------------------------------------------------------------------------------------


def get_version(caller: Caller, data: dict, *, write: bool = False) -> ModelVersion:
    return registry.get_version(get_model(caller, data.get("name"), write=write), data.get("version"))


@router.route("POST", "model-versions/create")
def create_model_version(caller: Caller, data: dict, _kw: dict) -> dict:
    model = get_model(caller, data.get("name"), write=True)
    run = get_run(caller, data) if data.get("run_id") else None
    version = registry.create_model_version(
        model,
        source=as_string(data.get("source"), "source", required=True, max_length=_max(ModelVersion, "source")),
        run=run,
        description=as_string(data.get("description"), "description"),
        tags=_pairs(data.get("tags"), "tags"),
        user_id=getattr(caller.user, "username", ""),
        run_link=as_string(data.get("run_link"), "run_link", max_length=_max(ModelVersion, "run_link")),
        model_id=as_string(data.get("model_id"), "model_id", max_length=_max(ModelVersion, "model_id")),
    )
    return {"model_version": s.model_version_json(caller, version, model)}


@router.route("GET", "model-versions/get")
def get_model_version(caller: Caller, data: dict, _kw: dict) -> dict:
    return {"model_version": s.model_version_json(caller, get_version(caller, data))}


@router.route("PATCH", "model-versions/update")
def update_model_version(caller: Caller, data: dict, _kw: dict) -> dict:
    version = get_version(caller, data, write=True)
    description = data.get("description")
    registry.update_model_version(version, description=None if description is None else str(description))
    return {"model_version": s.model_version_json(caller, version)}


@router.route("POST", "model-versions/transition-stage")
def transition_stage(caller: Caller, data: dict, _kw: dict) -> dict:
    version = get_version(caller, data, write=True)
    archive = str(data.get("archive_existing_versions", "")).lower() == "true"
    registry.transition_stage(version, as_string(data.get("stage"), "stage", required=True), archive)
    return {"model_version": s.model_version_json(caller, version)}


@router.route("DELETE", "model-versions/delete")
def delete_model_version(caller: Caller, data: dict, _kw: dict) -> dict:
    registry.delete_model_version(get_version(caller, data, write=True))
    return {}


@router.route("GET", "model-versions/search")
@router.route("POST", "model-versions/search")
def search_model_versions(caller: Caller, data: dict, _kw: dict) -> dict:
    qs = _scope(caller, ModelVersion.objects.select_related("registered_model"), "registered_model__project_id")
    strings = {"name": "registered_model__name", "run_id": "run__run_uuid", "source_path": "source", "source": "source"}
    qs = _filter(qs, data.get("filter"), strings, {"version_number": "version"}, "tags")
    page, token = _paged(qs.order_by("registered_model__name", "-version"), data, 10000, 200000)
    result: dict[str, Any] = {"model_versions": [s.model_version_json(caller, v) for v in page]}
    if token:
        result["next_page_token"] = token
    return result


@router.route("GET", "model-versions/get-download-uri")
def get_download_uri(caller: Caller, data: dict, _kw: dict) -> dict:
    return {"artifact_uri": get_version(caller, data).source}


@router.route("POST", "model-versions/set-tag")
def set_model_version_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    version = get_version(caller, data, write=True)
    registry.set_model_version_tag(version, data.get("key"), as_string(data.get("value"), "value"))
    return {}


@router.route("DELETE", "model-versions/delete-tag")
def delete_model_version_tag(caller: Caller, data: dict, _kw: dict) -> dict:
    version = get_version(caller, data, write=True)
    registry.delete_model_version_tag(version, as_string(data.get("key"), "key", required=True))
    return {}


# --- Logged models (MLflow 3) ------------------------------------------------------------------------------


def get_logged(caller: Caller, model_id: str, *, write: bool = False) -> LoggedModel:
    logged = LoggedModel.objects.select_related("experiment", "source_run").filter(model_id=model_id).first()
    if logged is None or logged.experiment.project_id not in caller.visible:
        raise NotFound(f"Logged model with ID '{model_id}' not found.")
    if write:
        caller.check_write(logged.experiment.project_id)
    return logged


@router.route("POST", "logged-models")
def create_logged_model(caller: Caller, data: dict, _kw: dict) -> dict:
    experiment = get_experiment(caller, data.get("experiment_id"), write=True)
    source_run = None
    if data.get("source_run_id"):
        source_run = get_run(caller, {"run_id": data["source_run_id"]})
        if source_run.experiment_id != experiment.pk and source_run.project_id != experiment.project_id:
            raise InvalidParameter("The source run belongs to another project.")
    logged = registry.create_logged_model(
        experiment,
        name=as_string(data.get("name"), "name", max_length=_max(LoggedModel, "name")),
        source_run=source_run,
        model_type=as_string(data.get("model_type"), "model_type", max_length=_max(LoggedModel, "model_type")),
        tags=_pairs(data.get("tags"), "tags"),
        params=_pairs(data.get("params"), "params"),
    )
    return {"model": s.logged_model_json(logged)}


@router.route("GET", "logged-models/{model_id}")
def get_logged_model(caller: Caller, data: dict, kw: dict) -> dict:
    return {"model": s.logged_model_json(get_logged(caller, kw["model_id"]))}


@router.route("PATCH", "logged-models/{model_id}")
def finalize_logged_model(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"], write=True)
    status = data.get("status")
    names = {1: "LOGGED_MODEL_PENDING", 2: "LOGGED_MODEL_READY", 3: "LOGGED_MODEL_UPLOAD_FAILED"}
    registry.finalize_logged_model(logged, names.get(status, status) if isinstance(status, int) else str(status))
    return {"model": s.logged_model_json(logged)}


@router.route("DELETE", "logged-models/{model_id}")
def delete_logged_model(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"], write=True)
    logged.lifecycle_stage = "deleted"
    logged.save(update_fields=["lifecycle_stage"])
    return {}


@router.route("PATCH", "logged-models/{model_id}/tags")
def set_logged_model_tags(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"], write=True)
    registry.set_logged_model_tags(logged, _pairs(data.get("tags"), "tags"))
    return {}


@router.route("DELETE", "logged-models/{model_id}/tags/{key}")
def delete_logged_model_tag(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"], write=True)
    logged.tags.filter(key=kw["key"]).delete()
    return {}


@router.route("POST", "logged-models/{model_id}/params")
def log_logged_model_params(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"], write=True)
    registry.log_logged_model_params(logged, _pairs(data.get("params"), "params"))
    return {}


@router.route("GET", "logged-models/{model_id}/artifacts/directories")
def list_logged_model_artifacts(caller: Caller, data: dict, kw: dict) -> dict:
    logged = get_logged(caller, kw["model_id"])
    sub = artifacts.clean_path(data.get("artifact_directory_path"))
    root = logged.artifact_location.removeprefix("mlflow-artifacts:/")
    files = [
        {**entry, "path": f"{sub}/{entry['path']}" if sub else entry["path"]}
        for entry in artifacts.list_dir(f"{root}/{sub}" if sub else root)
    ]
    return {"root_uri": logged.artifact_location, "files": files}


@router.route("POST", "logged-models/search")
def search_logged_models(caller: Caller, data: dict, _kw: dict) -> dict:
    ids = data.get("experiment_ids") or []
    if not isinstance(ids, list):
        raise InvalidParameter("Invalid value for parameter 'experiment_ids': expected a list.")
    pks = [get_experiment(caller, value).pk for value in ids]
    qs = LoggedModel.objects.filter(experiment_id__in=pks, lifecycle_stage="active")
    strings = {"name": "name", "model_id": "model_id", "model_type": "model_type", "status": "status",
               "source_run_id": "source_run__run_uuid"}  # fmt: skip
    qs = _filter(qs, data.get("filter"), strings, {"creation_timestamp": "creation_timestamp"}, "tags")
    page, token = _paged(qs.select_related("source_run").order_by("-creation_timestamp", "pk"), data, 100, 1000)
    result: dict[str, Any] = {"models": [s.logged_model_json(m) for m in page]}
    if token:
        result["next_page_token"] = token
    return result
