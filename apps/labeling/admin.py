"""Admin of labeling: projects read-only (the services keep them in step with Label Studio), their tasks as an
inline, and the local Label Studio server for superusers only (its password and token never shown)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.labeling.models import (
    Annotation,
    LabelingExport,
    LabelingProject,
    LabelingTask,
    LabelStudioServer,
    MLBackend,
)
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class LabelingTaskInline(ReadOnlyTabularInline):
    model = LabelingTask
    show_change_link = False
    max_num = 0


@admin.register(LabelingProject)
class LabelingProjectAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "kind", "status", "task_count", "ls_project_id", "created_at"]
    list_filter = ["kind", "status"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]
    inlines = [LabelingTaskInline]


@admin.register(Annotation)
class AnnotationAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Who annotated which task through the portal (the result itself lives in Label Studio)."""

    list_display = ["task", "username", "was_cancelled", "ls_annotation_id", "updated_at"]
    list_filter = ["was_cancelled"]
    search_fields = ["username", "task__labeling_project__name"]
    list_select_related = ["task__labeling_project"]


@admin.register(LabelingExport)
class LabelingExportAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["labeling_project", "version", "formats", "annotated_tasks", "created_at"]
    list_select_related = ["labeling_project", "version__dataset"]


@admin.register(MLBackend)
class MLBackendAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["labeling_project", "service", "ls_ml_backend_id", "created_at"]
    fields = ["labeling_project", "service", "username", "ls_ml_backend_id", "created_by", "created_at"]  # no hash
    list_select_related = ["labeling_project", "service"]


@admin.register(LabelStudioServer)
class LabelStudioServerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["key", "url", "email", "version", "provisioned_at"]
    fields = ["key", "url", "email", "version", "created_at", "provisioned_at"]  # never the password or token

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
