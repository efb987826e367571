"""Admin for tracking and the registry, restricted to the staff member's projects (TenantAdminMixin)."""

from __future__ import annotations

from django.contrib import admin

from apps.models.models import Experiment, LoggedModel, ModelAlias, ModelVersion, RegisteredModel, Run
from apps.projects.admin import TenantAdminMixin


@admin.register(Experiment)
class ExperimentAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "lifecycle_stage", "creation_time"]
    list_filter = ["lifecycle_stage"]
    search_fields = ["name", "project__slug"]
    raw_id_fields = ["project"]


@admin.register(Run)
class RunAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["run_uuid", "name", "experiment", "status", "lifecycle_stage", "start_time"]
    list_filter = ["status", "lifecycle_stage"]
    search_fields = ["run_uuid", "name", "experiment__name"]
    raw_id_fields = ["project", "experiment", "user", "source_pipeline_run", "source_task"]


@admin.register(LoggedModel)
class LoggedModelAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["model_id", "name", "experiment", "status"]
    search_fields = ["model_id", "name"]
    raw_id_fields = ["experiment", "source_run"]


@admin.register(RegisteredModel)
class RegisteredModelAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "last_updated_timestamp"]
    search_fields = ["name", "project__slug"]
    raw_id_fields = ["project"]


@admin.register(ModelVersion)
class ModelVersionAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["registered_model", "version", "status", "stage"]
    list_filter = ["status", "stage"]
    raw_id_fields = ["registered_model", "run"]


@admin.register(ModelAlias)
class ModelAliasAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["registered_model", "alias", "model_version"]
    raw_id_fields = ["registered_model", "model_version"]
