"""Experiment tracking: experiments, runs, and what a run logs (params, tags, metrics, dataset inputs).

Times are integer milliseconds since the epoch, as the MLflow protocol has them (no conversion on the hot
path). Metrics are append-only; `LatestMetric` keeps the latest value per (run, key) for listing and search.
"""

from __future__ import annotations

import math
import time

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.models.querysets import ACTIVE, DELETED, LifecycleQuerySet
from apps.projects.querysets import TenantQuerySet


def now_ms() -> int:
    return int(time.time() * 1000)


class Lifecycle(models.TextChoices):
    ACTIVE = ACTIVE, _("Active")
    DELETED = DELETED, _("Deleted")


class RunStatus(models.TextChoices):
    RUNNING = "RUNNING", _("Running")
    SCHEDULED = "SCHEDULED", _("Scheduled")
    FINISHED = "FINISHED", _("Finished")
    FAILED = "FAILED", _("Failed")
    KILLED = "KILLED", _("Killed")


class KeyValue(models.Model):
    """A key and its value attached to one object (tags, params): the shape MLflow gives them all."""

    key = models.CharField(max_length=250)
    value = models.TextField(blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.key}={self.value[:40]}"


class Experiment(models.Model):
    """A named group of runs inside a project (MLflow's experiment; its id is this primary key)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(_("name"), max_length=500)
    artifact_location = models.CharField(max_length=1000, blank=True)
    lifecycle_stage = models.CharField(max_length=10, choices=Lifecycle.choices, default=Lifecycle.ACTIVE)
    creation_time = models.BigIntegerField(default=now_ms)
    last_update_time = models.BigIntegerField(default=now_ms)

    objects = LifecycleQuerySet.as_manager()

    class Meta:
        ordering = ["project_id", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="models_experiment_name_unique")]

    def __str__(self) -> str:
        return self.name


class ExperimentTag(KeyValue):
    """A key/value tag of an experiment (e.g. `mlflow.note.content`)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="tags")

    tenant_path = "experiment__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "key"], name="models_experimenttag_unique")]


class Run(models.Model):
    """One tracked execution: params, tags, metrics and artifacts under `artifact_uri`.

    `project` is copied from the experiment (experiments never move) so tenant filters need no join.
    A run created with a pipeline task's token records that task and its pipeline run (`source_*`).
    """

    run_uuid = models.CharField(max_length=32, unique=True)
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="tracking_runs")
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(_("name"), max_length=250, blank=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    start_time = models.BigIntegerField(default=now_ms)
    end_time = models.BigIntegerField(null=True, blank=True)
    deleted_time = models.BigIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    user_id_text = models.CharField("user_id", max_length=250, blank=True)
    lifecycle_stage = models.CharField(max_length=10, choices=Lifecycle.choices, default=Lifecycle.ACTIVE)
    artifact_uri = models.CharField(max_length=1000)
    source_pipeline_run = models.ForeignKey(
        "jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="tracking_runs"
    )
    source_task = models.ForeignKey(
        "jobs.TaskRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="tracking_runs"
    )
    git_commit = models.CharField(max_length=64, blank=True)
    image = models.CharField(max_length=500, blank=True)

    objects = LifecycleQuerySet.as_manager()

    class Meta:
        ordering = ["-start_time", "run_uuid"]
        indexes = [models.Index(fields=["experiment", "lifecycle_stage", "start_time"])]

    def __str__(self) -> str:
        return self.name or self.run_uuid

    @property
    def is_active(self) -> bool:
        return self.lifecycle_stage == ACTIVE


class Param(KeyValue):
    """A run's input parameter. Immutable: logging the same key with another value is an error."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="params")

    tenant_path = "run__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="models_param_unique")]


class RunTag(KeyValue):
    """A run's tag (mutable; `mlflow.*` keys carry the client's system tags: source, git commit, user…)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tags")

    tenant_path = "run__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="models_runtag_unique")]


class Metric(models.Model):
    """One logged point of a metric. Append-only; inserted in bulk, skipping points already stored.

    A point is (run, key, step, timestamp, value, is_nan), MLflow's primary key: the same point logged again (a
    retried request, the client re-sending metrics when it logs a model) is stored once. NaN is stored as value 0
    with `is_nan` (MLflow's own representation). The unique index also serves history reads in (step, timestamp)
    order; the primary key is the keyset tie-breaker.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics", db_index=False)
    key = models.CharField(max_length=250)
    value = models.FloatField()
    timestamp = models.BigIntegerField()
    step = models.BigIntegerField(default=0)
    is_nan = models.BooleanField(default=False)

    tenant_path = "run__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "key", "step", "timestamp", "value", "is_nan"], name="models_metric_point_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.key}[{self.step}]={self.value}"

    @property
    def number(self) -> float:
        """The logged value, NaN included (stored as 0 with `is_nan`)."""
        return math.nan if self.is_nan else self.value


class LatestMetric(models.Model):
    """The latest point of each metric of a run: highest step, then timestamp, then value (MLflow's rule).

    Maintained by an upsert in the transaction that inserts the points, so concurrent writers converge.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="latest_metrics", db_index=False)
    key = models.CharField(max_length=250)
    value = models.FloatField()
    timestamp = models.BigIntegerField()
    step = models.BigIntegerField(default=0)
    is_nan = models.BooleanField(default=False)

    tenant_path = "run__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="models_latestmetric_unique")]
        indexes = [models.Index(fields=["key", "value"], name="models_latest_key_value")]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"

    @property
    def number(self) -> float:
        """The logged value, NaN included (stored as 0 with `is_nan`)."""
        return math.nan if self.is_nan else self.value


class ExperimentKey(models.Model):
    """A metric, param or tag key logged by some run of an experiment (the runs table's column chooser).

    Filled by database triggers on the inserts of `LatestMetric`, `Param` and `RunTag` (migration 0004), so every
    path that logs, bulk or raw SQL, records its keys without a query of its own. Rows are never removed when a
    run is deleted or a tag dropped: the table is a superset, and the page keeps the keys that an active run of
    the experiment still has (one indexed probe per key instead of a scan of every run's keys).
    """

    class Entity(models.TextChoices):
        METRIC = "metric", _("Metric")
        PARAM = "param", _("Param")
        TAG = "tag", _("Tag")

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="keys", db_index=False)
    entity = models.CharField(max_length=6, choices=Entity.choices)
    key = models.CharField(max_length=250)

    tenant_path = "experiment__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["experiment", "entity", "key"], name="models_experimentkey_unique")
        ]

    def __str__(self) -> str:
        return f"{self.entity}:{self.key}"


class RunInput(models.Model):
    """A dataset a run used (MLflow's log-inputs): name, digest, where it came from, schema and profile."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="inputs")
    name = models.CharField(max_length=500)
    digest = models.CharField(max_length=64)
    source_type = models.CharField(max_length=64, blank=True)
    source = models.TextField(blank=True)
    schema = models.TextField(blank=True)
    profile = models.TextField(blank=True)
    tags = models.JSONField(default=dict, blank=True, help_text=_("Input tags, e.g. mlflow.data.context."))

    tenant_path = "run__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "digest"], name="models_runinput_unique")]

    def __str__(self) -> str:
        return f"{self.name}@{self.digest}"


class ArtifactFile(models.Model):
    """A file in the artifact store (`path` relative to its root, which starts with the experiment id) and its size:
    what tracking artifacts count against the project's storage quota (apps/models/artifacts.py)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="artifact_files")
    path = models.CharField(max_length=1024, unique=True)
    size = models.BigIntegerField()

    def __str__(self) -> str:
        return self.path
