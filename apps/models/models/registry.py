"""The model registry (registered models, versions, aliases) and MLflow 3's logged models."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.models.models.tracking import Experiment, KeyValue, Lifecycle, Run, now_ms
from apps.projects.querysets import TenantQuerySet

MODEL_CARD_TEMPLATE = """# {name} v{version}

## Intended use

## Metrics

## Data

## Limitations
"""


class LoggedModel(models.Model):
    """A model logged by MLflow 3's `log_model` (`models:/m-…`): its files live under `artifact_location`."""

    class Status(models.TextChoices):
        PENDING = "LOGGED_MODEL_PENDING", _("Pending")
        READY = "LOGGED_MODEL_READY", _("Ready")
        FAILED = "LOGGED_MODEL_UPLOAD_FAILED", _("Upload failed")

    model_id = models.CharField(max_length=40, unique=True)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="logged_models")
    name = models.CharField(max_length=500)
    source_run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.PENDING)
    status_message = models.TextField(blank=True)
    model_type = models.CharField(max_length=100, blank=True)
    artifact_location = models.CharField(max_length=1000)
    lifecycle_stage = models.CharField(max_length=10, choices=Lifecycle.choices, default=Lifecycle.ACTIVE)
    creation_timestamp = models.BigIntegerField(default=now_ms)
    last_updated_timestamp = models.BigIntegerField(default=now_ms)

    tenant_path = "experiment__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-creation_timestamp"]

    def __str__(self) -> str:
        return f"{self.name} ({self.model_id})"

    @property
    def project(self):
        return self.experiment.project


class LoggedModelTag(KeyValue):
    """A tag of a logged model."""

    model = models.ForeignKey(LoggedModel, on_delete=models.CASCADE, related_name="tags")

    tenant_path = "model__experiment__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "key"], name="models_loggedmodeltag_unique")]


class LoggedModelParam(KeyValue):
    """A parameter of a logged model (immutable, like a run's)."""

    model = models.ForeignKey(LoggedModel, on_delete=models.CASCADE, related_name="params")

    tenant_path = "model__experiment__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "key"], name="models_loggedmodelparam_unique")]


class RegisteredModel(models.Model):
    """A named model of a project in the registry; its versions point at run or logged-model artifacts."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="registered_models")
    name = models.CharField(_("name"), max_length=250)
    description = models.TextField(_("description"), blank=True)
    creation_timestamp = models.BigIntegerField(default=now_ms)
    last_updated_timestamp = models.BigIntegerField(default=now_ms)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project_id", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="models_registeredmodel_unique")]

    def __str__(self) -> str:
        return self.name


class RegisteredModelTag(KeyValue):
    """A tag of a registered model."""

    registered_model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="tags")

    tenant_path = "registered_model__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["registered_model", "key"], name="models_rmtag_unique")]


class ModelVersion(models.Model):
    """Version N of a registered model: where its files are (`source`), the run it came from, its status,
    its (legacy) stage and a Markdown model card (intended use, metrics, data, limitations)."""

    class Status(models.TextChoices):
        PENDING = "PENDING_REGISTRATION", _("Pending registration")
        READY = "READY", _("Ready")
        FAILED = "FAILED_REGISTRATION", _("Failed registration")

    class Stage(models.TextChoices):
        NONE = "None", _("None")
        STAGING = "Staging", _("Staging")
        PRODUCTION = "Production", _("Production")
        ARCHIVED = "Archived", _("Archived")

    registered_model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=1000)
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="model_versions")
    run_link = models.CharField(max_length=1000, blank=True)
    model_id = models.CharField(max_length=40, blank=True)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.READY)
    status_message = models.TextField(blank=True)
    stage = models.CharField(max_length=12, choices=Stage.choices, default=Stage.NONE)
    description = models.TextField(_("description"), blank=True)
    model_card = models.TextField(_("model card"), blank=True, help_text=_("Markdown."))
    user_id_text = models.CharField("user_id", max_length=250, blank=True)
    creation_timestamp = models.BigIntegerField(default=now_ms)
    last_updated_timestamp = models.BigIntegerField(default=now_ms)

    tenant_path = "registered_model__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["registered_model_id", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["registered_model", "version"], name="models_modelversion_unique")
        ]

    def __str__(self) -> str:
        return f"{self.registered_model} v{self.version}"

    @property
    def project(self):
        return self.registered_model.project

    def default_model_card(self) -> str:
        return MODEL_CARD_TEMPLATE.format(name=self.registered_model.name, version=self.version)


class ModelVersionTag(KeyValue):
    """A tag of a model version."""

    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="tags")

    tenant_path = "model_version__registered_model__project"

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model_version", "key"], name="models_mvtag_unique")]


class ModelAlias(models.Model):
    """A movable name for one version of a registered model (`production`, `staging`, `champion`…)."""

    registered_model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    alias = models.CharField(max_length=255)
    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")

    tenant_path = "registered_model__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["registered_model_id", "alias"]
        constraints = [models.UniqueConstraint(fields=["registered_model", "alias"], name="models_alias_unique")]

    def __str__(self) -> str:
        return f"{self.registered_model}@{self.alias}"

    @property
    def project(self):
        return self.registered_model.project
