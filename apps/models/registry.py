"""Model registry workflows: registered models, versions, aliases, and MLflow 3's logged models.

A version's `source` must point inside the registered model's project (a run, a logged model or an
artifact path of one of its experiments): registering another tenant's files would leak them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max, ProtectedError, RestrictedError

from apps.models.errors import AlreadyExists, InvalidParameter, NotFound
from apps.models.models import (
    Experiment,
    LoggedModel,
    LoggedModelParam,
    LoggedModelTag,
    ModelAlias,
    ModelVersion,
    ModelVersionTag,
    RegisteredModel,
    RegisteredModelTag,
    Run,
    now_ms,
)
from apps.models.services import artifact_root
from apps.models.validation import (
    MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH,
    check_length,
    validate_alias,
    validate_name,
)
from portal.lib.errors import Conflict

_ARTIFACTS_RE = re.compile(r"^mlflow-artifacts:/+(\d+)(/.*)?$")
_RUNS_RE = re.compile(r"^runs:/([0-9a-f]{32})(/.*)?$")
_MODELS_ID_RE = re.compile(r"^models:/(m-[0-9a-f]{32})(/.*)?$")


def _touch(model: RegisteredModel) -> None:
    model.last_updated_timestamp = now_ms()
    model.save(update_fields=["last_updated_timestamp"])


def create_registered_model(
    project: Any, name: str, *, description: str = "", tags: Iterable[tuple[str, str]] = ()
) -> RegisteredModel:
    if not isinstance(name, str) or not name.strip():
        raise InvalidParameter("Registered model name cannot be empty.")
    check_length("registered model name", 250, name)
    tags = [_tag(k, v) for k, v in tags]
    if RegisteredModel.objects.filter(project=project, name=name).exists():
        raise AlreadyExists(f"Registered Model (name={name}) already exists.")
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(project=project, name=name, description=description or "")
            RegisteredModelTag.objects.bulk_create(
                RegisteredModelTag(registered_model=model, key=k, value=v) for k, v in tags
            )
    except IntegrityError:
        raise AlreadyExists(f"Registered Model (name={name}) already exists.") from None
    return model


def _tag(key: Any, value: Any) -> tuple[str, str]:
    validate_name(key, "key", "Tag")
    value = "" if value is None else str(value)
    check_length("tag value", MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH, value)
    return key, value


def rename_registered_model(model: RegisteredModel, new_name: str) -> RegisteredModel:
    if not isinstance(new_name, str) or not new_name.strip():
        raise InvalidParameter("Registered model name cannot be empty.")
    if RegisteredModel.objects.filter(project_id=model.project_id, name=new_name).exclude(pk=model.pk).exists():
        raise AlreadyExists(f"Registered Model (name={new_name}) already exists.")
    model.name = new_name
    model.last_updated_timestamp = now_ms()
    model.save(update_fields=["name", "last_updated_timestamp"])
    return model


def update_registered_model(model: RegisteredModel, description: str | None) -> RegisteredModel:
    if description is not None:
        model.description = description
    _touch(model)
    return model


def set_registered_model_tag(model: RegisteredModel, key: str, value: str) -> None:
    key, value = _tag(key, value)
    RegisteredModelTag.objects.update_or_create(registered_model=model, key=key, defaults={"value": value})


def delete_registered_model_tag(model: RegisteredModel, key: str) -> None:
    RegisteredModelTag.objects.filter(registered_model=model, key=key).delete()


def resolve_source(project_id: int, source: str, run: Run | None) -> tuple[str, Run | None, str]:
    """(storage source, run, logged model id) of a version's `source`, checked to lie in `project_id`."""
    if not isinstance(source, str) or not source:
        raise InvalidParameter("Missing value for required parameter 'source'.")
    model_id = ""
    if match := _RUNS_RE.match(source):
        run = Run.objects.filter(run_uuid=match.group(1), project_id=project_id).first()
        if run is None:
            raise InvalidParameter(f"Invalid model version source: '{source}'. The run does not exist.")
        source = f"{run.artifact_uri}{match.group(2) or ''}"
    elif match := _MODELS_ID_RE.match(source):
        logged = LoggedModel.objects.filter(model_id=match.group(1), experiment__project_id=project_id).first()
        if logged is None:
            raise InvalidParameter(f"Invalid model version source: '{source}'. The logged model does not exist.")
        model_id = logged.model_id
        source = f"{logged.artifact_location}{match.group(2) or ''}"
    if match := _ARTIFACTS_RE.match(source):
        if not Experiment.objects.filter(pk=int(match.group(1)), project_id=project_id).exists():
            raise InvalidParameter(f"Invalid model version source: '{source}'. It is outside this project.")
        if ".." in (match.group(2) or "").split("/"):
            raise InvalidParameter(f"Invalid model version source: '{source}'.")
        return source, run, model_id
    raise InvalidParameter(
        f"Invalid model version source: '{source}'. Use runs:/<run_id>/<path>, models:/<model_id> or an "
        "mlflow-artifacts:/ location of this project."
    )


def create_model_version(
    model: RegisteredModel,
    *,
    source: str,
    run: Run | None = None,
    description: str = "",
    tags: Iterable[tuple[str, str]] = (),
    user_id: str = "",
    run_link: str = "",
    model_id: str = "",
) -> ModelVersion:
    """The next version of `model` (READY at once: files stay where the run or logged model put them)."""
    if run is not None and run.project_id != model.project_id:
        raise InvalidParameter("The run belongs to another project.")
    source, run, resolved_model_id = resolve_source(model.project_id, source, run)
    tags = [_tag(k, v) for k, v in tags]
    for _attempt in range(5):
        try:
            with transaction.atomic():
                last = ModelVersion.objects.filter(registered_model=model).aggregate(m=Max("version"))["m"] or 0
                version = ModelVersion.objects.create(
                    registered_model=model,
                    version=last + 1,
                    source=source,
                    run=run,
                    run_link=run_link or "",
                    model_id=model_id or resolved_model_id,
                    description=description or "",
                    user_id_text=user_id,
                    status=ModelVersion.Status.READY,
                )
                version.model_card = version.default_model_card()
                version.save(update_fields=["model_card"])
                ModelVersionTag.objects.bulk_create(
                    ModelVersionTag(model_version=version, key=k, value=v) for k, v in tags
                )
                _touch(model)
            return version
        except IntegrityError:  # another writer took that number: take the next one
            continue
    raise AlreadyExists("Could not allocate a version number; try again.")


def update_model_version(
    version: ModelVersion, *, description: str | None = None, model_card: str | None = None
) -> ModelVersion:
    fields = ["last_updated_timestamp"]
    if description is not None:
        version.description = description
        fields.append("description")
    if model_card is not None:
        version.model_card = model_card
        fields.append("model_card")
    version.last_updated_timestamp = now_ms()
    version.save(update_fields=fields)
    return version


def transition_stage(version: ModelVersion, stage: str, archive_existing: bool = False) -> ModelVersion:
    by_lower = {s.lower(): s for s in ModelVersion.Stage.values}
    value = by_lower.get(str(stage).lower())
    if value is None:
        raise InvalidParameter(f"Invalid Model Version stage: {stage}. Value must be one of {list(by_lower.values())}.")
    with transaction.atomic():
        if archive_existing and value in (ModelVersion.Stage.STAGING, ModelVersion.Stage.PRODUCTION):
            ModelVersion.objects.filter(registered_model=version.registered_model, stage=value).exclude(
                pk=version.pk
            ).update(stage=ModelVersion.Stage.ARCHIVED, last_updated_timestamp=now_ms())
        version.stage = value
        version.last_updated_timestamp = now_ms()
        version.save(update_fields=["stage", "last_updated_timestamp"])
    return version


def set_model_version_tag(version: ModelVersion, key: str, value: str) -> None:
    key, value = _tag(key, value)
    ModelVersionTag.objects.update_or_create(model_version=version, key=key, defaults={"value": value})


def delete_model_version_tag(version: ModelVersion, key: str) -> None:
    ModelVersionTag.objects.filter(model_version=version, key=key).delete()


def get_version(model: RegisteredModel, version: Any) -> ModelVersion:
    try:
        number = int(str(version))
    except (TypeError, ValueError):
        raise InvalidParameter(f"Model version must be an integer, got '{version}'.") from None
    found = ModelVersion.objects.filter(registered_model=model, version=number).first()
    if found is None:
        raise NotFound(f"Model Version (name={model.name}, version={number}) not found")
    return found


def set_alias(model: RegisteredModel, alias: str, version: Any) -> ModelAlias:
    validate_alias(alias)
    target = get_version(model, version)
    row, _created = ModelAlias.objects.update_or_create(
        registered_model=model, alias=alias, defaults={"model_version": target}
    )
    _touch(model)
    return row


def delete_alias(model: RegisteredModel, alias: str) -> None:
    ModelAlias.objects.filter(registered_model=model, alias=alias).delete()
    _touch(model)


def version_by_alias(model: RegisteredModel, alias: str) -> ModelVersion:
    """The version an alias points at; `latest` (which no alias may be named) is the highest version. A missing
    alias is INVALID_PARAMETER_VALUE, as MLflow's server answers (tests/models/test_against_mlflow_server.py)."""
    if alias.lower() == "latest":
        newest = ModelVersion.objects.filter(registered_model=model).order_by("-version").first()
        if newest is None:
            raise NotFound(f"Latest version not found for model {model.name}.")
        return newest
    row = ModelAlias.objects.filter(registered_model=model, alias=alias).select_related("model_version").first()
    if row is None:
        raise InvalidParameter(f"Registered model alias {alias} not found.")
    return row.model_version


# --- Logged models (MLflow 3) -------------------------------------------------------------------------


def create_logged_model(
    experiment: Experiment,
    *,
    name: str = "",
    source_run: Run | None = None,
    model_type: str = "",
    tags: Iterable[tuple[str, str]] = (),
    params: Iterable[tuple[str, str]] = (),
) -> LoggedModel:
    model_id = f"m-{uuid.uuid4().hex}"
    with transaction.atomic():
        logged = LoggedModel.objects.create(
            model_id=model_id,
            experiment=experiment,
            name=name or model_id,
            source_run=source_run,
            model_type=model_type or "",
            artifact_location=f"{artifact_root(experiment.pk)}/models/{model_id}/artifacts",
        )
        LoggedModelTag.objects.bulk_create(LoggedModelTag(model=logged, key=k, value=v) for k, v in dict(tags).items())
        log_logged_model_params(logged, params)
    return logged


def log_logged_model_params(logged: LoggedModel, params: Iterable[tuple[str, str]]) -> None:
    LoggedModelParam.objects.bulk_create(
        [LoggedModelParam(model=logged, key=k, value=v) for k, v in dict(params).items()], ignore_conflicts=True
    )


def set_logged_model_tags(logged: LoggedModel, tags: Iterable[tuple[str, str]]) -> None:
    LoggedModelTag.objects.bulk_create(
        [LoggedModelTag(model=logged, key=k, value=v) for k, v in dict(tags).items()],
        update_conflicts=True,
        unique_fields=["model", "key"],
        update_fields=["value"],
    )


def finalize_logged_model(logged: LoggedModel, status: str) -> LoggedModel:
    if status not in LoggedModel.Status.values:
        raise InvalidParameter(f"Invalid logged model status '{status}'.")
    logged.status = status
    logged.last_updated_timestamp = now_ms()
    logged.save(update_fields=["status", "last_updated_timestamp"])
    return logged


def delete_registered_model(model: RegisteredModel) -> None:
    """Delete the model with its versions and aliases. Refused with a Conflict naming them while inference services
    (or their revisions, the deploy history) use one of its versions: a service must never lose what it serves."""
    try:
        with transaction.atomic():
            model.delete()
    except (ProtectedError, RestrictedError) as exc:
        raise Conflict.from_protected(exc, model) from None


def delete_model_version(version: ModelVersion) -> None:
    """Delete one version; refused with a Conflict naming the services (or revisions) that use it."""
    try:
        with transaction.atomic():
            version.delete()
    except (ProtectedError, RestrictedError) as exc:
        raise Conflict.from_protected(exc, version) from None


def model_names(project: Any) -> list[str]:
    """The names of the project's registered models (what a pipeline's `model` argument may name), in order."""
    return list(RegisteredModel.objects.filter(project=project).order_by("name").values_list("name", flat=True))
