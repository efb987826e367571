"""Tracking workflows: experiments, runs, and logging to them (params, tags, metrics, inputs).

Functions take model objects and plain values, return model objects and raise `apps.models.errors`
(which carry MLflow's error codes). Who may call them is decided before, by `apps.models.access.Caller`.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction
from prometheus_client import Counter

from apps.datasets.models import DatasetUsage
from apps.jobs.dispatcher import task_image
from apps.jobs.models import JobTemplate, TaskRun
from apps.models import metrics as metric_store
from apps.models.errors import AlreadyExists, InvalidParameter
from apps.models.models import Experiment, ExperimentTag, Param, Run, RunInput, RunStatus, RunTag, now_ms
from apps.models.querysets import ACTIVE, DELETED
from apps.models.validation import (
    MAX_EXPERIMENT_NAME_LENGTH,
    MAX_EXPERIMENT_TAG_VAL_LENGTH,
    MAX_TAG_VAL_LENGTH,
    as_float,
    as_int,
    as_string,
    check_length,
    validate_batch_limits,
    validate_name,
)

LOGGED = Counter("portal_tracking_logged", "Metric points, params and tags logged to tracked runs", ["kind"])
DEFAULT_EXPERIMENT = "Default"
RUN_NAME_TAG = "mlflow.runName"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
IMAGE_TAG = "portal.image"
TEMPLATE_TAG = "portal.template"
IMAGE_DIGEST_TAG = "portal.image.digest"
_ADJECTIVES = ("brave", "calm", "eager", "gentle", "keen", "lucky", "merry", "quiet", "swift", "wise")
_NOUNS = ("otter", "heron", "lynx", "finch", "koala", "panda", "wren", "yak", "ibis", "moth")


def artifact_root(experiment_id: int) -> str:
    return f"mlflow-artifacts:/{experiment_id}"


# --- Experiments -------------------------------------------------------------------------------------


def create_experiment(project: Any, name: str, tags: Iterable[tuple[str, str]] = ()) -> Experiment:
    """A new experiment in `project`; names are unique per project, deleted experiments included."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidParameter("Invalid experiment name: ''. Experiment name must be a non-empty string.")
    check_length("experiment name", MAX_EXPERIMENT_NAME_LENGTH, name)
    tags = [(validate_name(k, "key", "Tag"), v) for k, v in tags]
    for _k, value in tags:
        check_length("tag value", MAX_EXPERIMENT_TAG_VAL_LENGTH, value)
    existing = Experiment.objects.filter(project=project, name=name).first()
    if existing is not None:
        raise AlreadyExists(_already_exists(existing))
    try:
        with transaction.atomic():
            experiment = Experiment.objects.create(project=project, name=name)
            experiment.artifact_location = artifact_root(experiment.pk)
            experiment.save(update_fields=["artifact_location"])
            ExperimentTag.objects.bulk_create(ExperimentTag(experiment=experiment, key=k, value=v) for k, v in tags)
    except IntegrityError:
        raise AlreadyExists(f"Experiment(name={name}) already exists.") from None
    return experiment


def _already_exists(experiment: Experiment) -> str:
    if experiment.lifecycle_stage == DELETED:
        return (
            f"Experiment '{experiment.name}' already exists in deleted state. You can restore the experiment, or "
            "permanently delete the experiment to create a new one."
        )
    return f"Experiment(name={experiment.name}) already exists."


def default_experiment(project: Any) -> Experiment:
    """The project's "Default" experiment (MLflow's experiment 0), created on first use."""
    experiment = Experiment.objects.filter(project=project, name=DEFAULT_EXPERIMENT).first()
    if experiment is None:
        try:
            experiment = create_experiment(project, DEFAULT_EXPERIMENT)
        except AlreadyExists:
            experiment = Experiment.objects.get(project=project, name=DEFAULT_EXPERIMENT)
    return experiment


def rename_experiment(experiment: Experiment, new_name: str) -> Experiment:
    if not isinstance(new_name, str) or not new_name.strip():
        raise InvalidParameter("Invalid experiment name: ''. Experiment name must be a non-empty string.")
    check_length("experiment name", MAX_EXPERIMENT_NAME_LENGTH, new_name)
    if experiment.lifecycle_stage != ACTIVE:
        raise InvalidParameter("Cannot rename a non-active experiment.")
    clash = Experiment.objects.filter(project_id=experiment.project_id, name=new_name).exclude(pk=experiment.pk)
    if clash.exists():
        raise AlreadyExists(_already_exists(clash.first()))
    experiment.name = new_name
    experiment.last_update_time = now_ms()
    experiment.save(update_fields=["name", "last_update_time"])
    return experiment


def set_experiment_lifecycle(experiment: Experiment, stage: str) -> Experiment:
    """Delete or restore an experiment; its runs follow (MLflow marks them deleted too)."""
    with transaction.atomic():
        experiment.lifecycle_stage = stage
        experiment.last_update_time = now_ms()
        experiment.save(update_fields=["lifecycle_stage", "last_update_time"])
        runs = Run.objects.filter(experiment=experiment)
        if stage == DELETED:
            runs.filter(lifecycle_stage=ACTIVE).update(lifecycle_stage=DELETED, deleted_time=now_ms())
        else:
            runs.filter(lifecycle_stage=DELETED).update(lifecycle_stage=ACTIVE, deleted_time=None)
    return experiment


def set_experiment_tag(experiment: Experiment, key: str, value: str) -> None:
    validate_name(key, "key", "Tag")
    check_length("tag value", MAX_EXPERIMENT_TAG_VAL_LENGTH, value)
    ExperimentTag.objects.update_or_create(experiment=experiment, key=key, defaults={"value": value})


def delete_experiment_tag(experiment: Experiment, key: str) -> None:
    ExperimentTag.objects.filter(experiment=experiment, key=key).delete()


# --- Runs ----------------------------------------------------------------------------------------------


def random_run_name() -> str:
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.randbelow(1000)}"


def create_run(
    experiment: Experiment,
    *,
    user: Any,
    user_id: str = "",
    run_name: str = "",
    start_time: int | None = None,
    tags: Iterable[tuple[str, str]] = (),
    source_task: Any = None,
) -> Run:
    """A RUNNING run. A run started by a pipeline task (`source_task`) records the task and its pipeline run."""
    if experiment.lifecycle_stage != ACTIVE:
        raise InvalidParameter(
            f"The experiment {experiment.pk} must be in the 'active' state. Current state is "
            f"{experiment.lifecycle_stage}."
        )
    tags = dict(tags)
    for key, value in tags.items():
        validate_name(key, "key", "Tag")
        check_length("tag value", MAX_TAG_VAL_LENGTH, value)
    if source_task is not None:  # which code ran; what the client sent wins
        tags = {**_task_code_tags(source_task), **tags}
    name = run_name or tags.get(RUN_NAME_TAG) or random_run_name()
    tags[RUN_NAME_TAG] = name
    run_uuid = uuid.uuid4().hex
    with transaction.atomic():
        if source_task is not None and IMAGE_DIGEST_TAG not in tags:
            digest = _task_image_digest(source_task)
            if digest:
                tags[IMAGE_DIGEST_TAG] = digest
        run = Run.objects.create(
            run_uuid=run_uuid,
            project_id=experiment.project_id,
            experiment=experiment,
            name=name[:250],
            start_time=start_time if start_time is not None else now_ms(),
            user=user if getattr(user, "is_authenticated", False) else None,
            user_id_text=user_id or getattr(user, "username", ""),
            artifact_uri=f"{artifact_root(experiment.pk)}/{run_uuid}/artifacts",
            source_task=source_task,
            source_pipeline_run_id=getattr(source_task, "run_id", None),
            git_commit=tags.get(GIT_COMMIT_TAG, "")[:64],
            image=tags.get(IMAGE_TAG, "")[:500],
        )
        RunTag.objects.bulk_create(RunTag(run=run, key=k, value=v) for k, v in tags.items())
        if source_task is not None:
            RunInput.objects.bulk_create(_pipeline_inputs(run, source_task), ignore_conflicts=True)
    return run


def _task_code_tags(task: Any) -> dict[str, str]:
    """What a pipeline task ran, as the frozen run resolved it: its template as `slug@version` (a template's
    version changes with what it runs), the image, the pipeline run and node."""
    tags = {"portal.pipeline_run": str(task.run_id), "portal.task": task.node}
    node = next((n for n in task.run.spec.get("nodes", []) if n.get("name") == task.node), None) or {}
    if node.get("template"):
        tags[TEMPLATE_TAG] = str(node["template"])
    template = JobTemplate.objects.filter(pk=node.get("template_id")).only("image").first()
    if template is not None:
        tags[IMAGE_TAG] = task_image(template)
    return tags


def _task_image_digest(task: Any) -> str:
    """The image digest the task's runtime reported so far ("" before its pod started, or on the local runtime).
    Read under the task's row lock, which `tag_image_digest`'s caller holds while it tags the task's runs: a run
    created while the digest is recorded either sees the digest here or is committed before it is tagged."""
    locked = TaskRun.objects.select_for_update(no_key=True).filter(pk=task.pk)
    found = locked.values_list("image_digest", flat=True).first()
    return found or ""


def tag_image_digest(task_id: int, digest: str) -> None:
    """Tag the tracked runs a pipeline task started with the image digest its runtime reported once the pods
    ran (the runs may have been created before it was known). A tag a client set itself is left as it is."""
    runs = Run.objects.filter(source_task_id=task_id).values_list("pk", flat=True)
    RunTag.objects.bulk_create(
        [RunTag(run_id=pk, key=IMAGE_DIGEST_TAG, value=digest[:MAX_TAG_VAL_LENGTH]) for pk in runs],
        ignore_conflicts=True,
    )


def _pipeline_inputs(run: Run, task: Any) -> list[RunInput]:
    """The dataset versions the task's pipeline run has read so far (lineage: data → run → model)."""
    usages = DatasetUsage.objects.filter(pipeline_run_id=task.run_id, direction="read").select_related(
        "version__dataset"
    )
    return [
        RunInput(
            run=run,
            name=f"{u.version.dataset.name}@v{u.version.number}",
            digest=u.version.digest[:64],
            source_type="portal-dataset",
            source=f"{u.version.dataset.project_id}:{u.version.dataset.name}@{u.version.number}",
            tags={"portal.dataset_version": str(u.version_id)},
        )
        for u in usages
    ]


def check_active(run: Run) -> None:
    if run.lifecycle_stage != ACTIVE:
        raise InvalidParameter(
            f"The run {run.run_uuid} must be in the 'active' state. Current state is {run.lifecycle_stage}."
        )


def update_run(run: Run, *, status: str | None = None, end_time: int | None = None, run_name: str | None = None) -> Run:
    check_active(run)
    fields = []
    if status:
        if status not in RunStatus.values:
            raise InvalidParameter(f"Invalid value {status!r} for parameter 'status' supplied.")
        run.status = status
        fields.append("status")
    if end_time is not None:
        run.end_time = end_time
        fields.append("end_time")
    with transaction.atomic():
        if run_name:
            run.name = run_name[:250]
            fields.append("name")
            RunTag.objects.update_or_create(run=run, key=RUN_NAME_TAG, defaults={"value": run_name})
        if fields:
            run.save(update_fields=fields)
    return run


def set_run_lifecycle(run: Run, stage: str) -> Run:
    run.lifecycle_stage = stage
    run.deleted_time = now_ms() if stage == DELETED else None
    run.save(update_fields=["lifecycle_stage", "deleted_time"])
    return run


# --- Logging -------------------------------------------------------------------------------------------


# Metric keys already validated in this process: a batch repeats a few keys hundreds of times, and validating one
# (a regular expression, a path normalisation) cost more than storing its point. Bounded; only valid keys enter.
_VALID_METRIC_KEYS: set[str] = set()


def parse_metric(data: Any, path: str, default_timestamp: int | None = None) -> metric_store.Point:
    if not isinstance(data, dict):
        raise InvalidParameter(f"Invalid value {data!r} for parameter '{path}' supplied.")
    key = data.get("key")
    if type(key) is not str or key not in _VALID_METRIC_KEYS:
        key = validate_name(key, f"{path}.key" if path else "key")
        if len(_VALID_METRIC_KEYS) >= 10_000:
            _VALID_METRIC_KEYS.clear()
        _VALID_METRIC_KEYS.add(key)
    value = as_float(data.get("value"), f"{path}.value" if path else "value")
    timestamp = as_int(
        data.get("timestamp"), "timestamp", default=default_timestamp, required=default_timestamp is None
    )
    if timestamp < 0:
        raise InvalidParameter(f"Invalid value {timestamp} for parameter 'timestamp': must be nonnegative.")
    step = as_int(data.get("step"), "step", default=0)
    return metric_store.make_point(key, value, timestamp, step)


def parse_pair(data: Any, path: str, what: str, limit: int) -> tuple[str, str]:
    if not isinstance(data, dict):
        raise InvalidParameter(f"Invalid value {data!r} for parameter '{path}' supplied.")
    key = validate_name(data.get("key"), f"{path}.key", what)
    value = as_string(data.get("value"), f"{path}.value")
    check_length(f"{what.lower()} value", limit, value)
    return key, value


def log_batch(
    run: Run,
    *,
    metrics: list[metric_store.Point] = (),
    params: list[tuple[str, str]] = (),
    tags: list[tuple[str, str]] = (),
) -> None:
    """Store metrics, params and tags of one run in one transaction (all or nothing).

    Params are immutable: the same value again is accepted, another value is INVALID_PARAMETER_VALUE.
    """
    validate_batch_limits(len(metrics), len(params), len(tags))
    check_active(run)
    keys = [k for k, _v in params]
    if len(set(keys)) != len(keys):
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        raise InvalidParameter(
            f"Duplicate parameter keys have been submitted: {dupes}. Please ensure the request contains only one "
            "param value per param key."
        )
    with transaction.atomic():
        if params:
            _log_params(run, params)
        if tags:
            _set_tags(run, tags)
        if metrics:
            metric_store.insert_points(run.pk, list(metrics))
    # Logging is telemetry: not audited call by call (apps/audit/middleware.py), counted here in aggregate.
    for kind, count in (("metric", len(metrics)), ("param", len(params)), ("tag", len(tags))):
        if count:
            LOGGED.labels(kind).inc(count)


def log_metrics_by_run_id(run_uuid: str, project_ids: Iterable[int], points: list[metric_store.Point]) -> bool:
    """Store a few points for the active run `run_uuid` if it is in `project_ids`, in one round trip where the
    database allows (`metrics.insert_points_by_run_uuid`). False when that fast path did not store them (another
    database, too many points, or no such run there): nothing was written, and the caller goes the ordinary way
    (`get_run` and `log_batch`), which gives the reason."""
    if not metric_store.insert_points_by_run_uuid(run_uuid, project_ids, points):
        return False
    LOGGED.labels("metric").inc(len(points))
    return True


def _log_params(run: Run, params: list[tuple[str, str]]) -> None:
    wanted = dict(params)
    existing = dict(Param.objects.filter(run=run, key__in=wanted).values_list("key", "value"))
    missing = [Param(run=run, key=k, value=v) for k, v in params if k not in existing]
    if missing:
        Param.objects.bulk_create(missing, ignore_conflicts=True)
        existing = dict(Param.objects.filter(run=run, key__in=wanted).values_list("key", "value"))
    for key, value in params:
        if existing.get(key, value) != value:
            raise InvalidParameter(
                f"Changing param values is not allowed. Param with key='{key}' was already logged with "
                f"value='{existing[key]}' for run ID='{run.run_uuid}'. Attempted logging new value '{value}'."
            )


def _set_tags(run: Run, tags: list[tuple[str, str]]) -> None:
    merged = dict(tags)  # the last value of a key wins, as in MLflow
    RunTag.objects.bulk_create(
        [RunTag(run=run, key=k, value=v) for k, v in merged.items()],
        update_conflicts=True,
        unique_fields=["run", "key"],
        update_fields=["value"],
    )
    changed = []
    if RUN_NAME_TAG in merged and merged[RUN_NAME_TAG] != run.name:
        run.name = merged[RUN_NAME_TAG][:250]
        changed.append("name")
    if GIT_COMMIT_TAG in merged:
        run.git_commit = merged[GIT_COMMIT_TAG][:64]
        changed.append("git_commit")
    if changed:
        run.save(update_fields=changed)


def delete_tag(run: Run, key: str) -> None:
    check_active(run)
    deleted, _n = RunTag.objects.filter(run=run, key=key).delete()
    if not deleted:
        from apps.models.errors import NotFound

        raise NotFound(f"No tag with name: {key} in run with id {run.run_uuid}")


def log_inputs(run: Run, datasets: list[dict]) -> None:
    """Record the datasets a run used (deduplicated by name and digest; their context tags merge)."""
    check_active(run)
    with transaction.atomic():
        for index, item in enumerate(datasets):
            if not isinstance(item, dict) or not isinstance(item.get("dataset"), dict):
                raise InvalidParameter(f"Invalid value for parameter 'datasets[{index}]' supplied.")
            dataset = item["dataset"]
            name = as_string(dataset.get("name"), f"datasets[{index}].dataset.name", required=True)
            digest = as_string(dataset.get("digest"), f"datasets[{index}].dataset.digest", required=True)
            check_length("dataset name", 500, name)
            check_length("dataset digest", 36, digest)
            tags = {
                str(t.get("key")): str(t.get("value", ""))
                for t in item.get("tags") or []
                if isinstance(t, dict) and t.get("key")
            }
            row, created = RunInput.objects.get_or_create(
                run=run,
                name=name,
                digest=digest,
                defaults={
                    "source_type": as_string(dataset.get("source_type"), "source_type")[:64],
                    "source": as_string(dataset.get("source"), "source"),
                    "schema": as_string(dataset.get("schema"), "schema"),
                    "profile": as_string(dataset.get("profile"), "profile"),
                    "tags": tags,
                },
            )
            if not created and tags:
                row.tags = {**row.tags, **tags}
                row.save(update_fields=["tags"])
