"""Admin for tracking and the registry, restricted to the staff member's projects (TenantAdminMixin). Tags, params,
latest metrics and inputs are read-only rows of their parent (the MLflow API writes them); a metric's full history is
on the run page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from apps.models.models import (
    ArtifactFile,
    Experiment,
    ExperimentTag,
    LatestMetric,
    LoggedModel,
    LoggedModelParam,
    LoggedModelTag,
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
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


def inline(child: type[models.Model]) -> type[ReadOnlyTabularInline]:
    """A read-only inline of `child`'s rows on its parent's page."""
    return type(f"{child.__name__}Inline", (ReadOnlyTabularInline,), {"model": child, "show_change_link": False})


@admin.register(Experiment)
class ExperimentAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "lifecycle_stage", "creation_time"]
    list_filter = ["lifecycle_stage"]
    search_fields = ["name", "project__slug"]
    raw_id_fields = ["project"]
    inlines = [inline(ExperimentTag)]


@admin.register(Run)
class RunAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["run_uuid", "name", "experiment", "status", "lifecycle_stage", "start_time"]
    list_filter = ["status", "lifecycle_stage"]
    search_fields = ["run_uuid", "name", "experiment__name"]
    raw_id_fields = ["project", "experiment", "user", "source_pipeline_run", "source_task"]
    inlines = [inline(Param), inline(RunTag), inline(LatestMetric), inline(RunInput)]


@admin.register(LoggedModel)
class LoggedModelAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["model_id", "name", "experiment", "status"]
    search_fields = ["model_id", "name"]
    raw_id_fields = ["experiment", "source_run"]
    inlines = [inline(LoggedModelTag), inline(LoggedModelParam)]


@admin.register(RegisteredModel)
class RegisteredModelAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "last_updated_timestamp"]
    search_fields = ["name", "project__slug"]
    raw_id_fields = ["project"]
    inlines = [inline(RegisteredModelTag)]


@admin.register(ModelVersion)
class ModelVersionAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["registered_model", "version", "status", "stage"]
    list_filter = ["status", "stage"]
    raw_id_fields = ["registered_model", "run"]
    inlines = [inline(ModelVersionTag)]


@admin.register(ModelAlias)
class ModelAliasAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["registered_model", "alias", "model_version"]
    raw_id_fields = ["registered_model", "model_version"]


@admin.register(ArtifactFile)
class ArtifactFileAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What tracking artifacts count against storage quotas (written by the artifact store). Superusers only: the
    rows have no tenant manager to scope them by."""

    list_display = ["path", "project", "size"]
    search_fields = ["path", "project__slug"]
    list_select_related = ["project"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
