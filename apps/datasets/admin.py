"""Admin of datasets, restricted to the staff member's projects (TenantAdminMixin). Versions, uploads and blobs are
records to look at: a version is committed, an upload finished and a blob purged by the services, which keep the
content store consistent; a dataset's descriptive fields may be edited, and it is deleted from its page or the API
(which purges the blobs only it used)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.datasets.models import Blob, Dataset, DatasetUsage, DatasetVersion, UploadFile, UploadSession
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class VersionInline(ReadOnlyTabularInline):
    model = DatasetVersion
    fields = ["number", "message", "file_count", "total_size", "analysis_status", "created_by", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.fields


@admin.register(Dataset)
class DatasetAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "licence", "created_by", "created_at"]
    search_fields = ["name", "description", "project__slug"]
    list_select_related = ["project", "created_by"]
    readonly_fields = ["project", "name", "created_by", "created_at"]
    inlines = [VersionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made on its page or through the API (`services.create_dataset`)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # `services.delete_dataset` purges its blobs; the admin's delete would not


class UsageInline(ReadOnlyTabularInline):
    model = DatasetUsage
    fields = ["direction", "pipeline_run", "task_run", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.fields


@admin.register(DatasetVersion)
class DatasetVersionAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "file_count", "total_size", "analysis_status", "created_by", "created_at"]
    list_filter = ["analysis_status"]
    search_fields = ["dataset__name", "dataset__project__slug", "digest"]
    list_select_related = ["dataset", "created_by"]
    exclude = ["schema", "statistics", "previews"]  # the version page shows them readably
    inlines = [UsageInline]  # its files (thousands, maybe) are on the version page


class UploadFileInline(ReadOnlyTabularInline):
    model = UploadFile
    fields = ["path", "size", "offset", "archive", "blob", "created_at"]
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.fields


@admin.register(UploadSession)
class UploadSessionAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["id", "dataset", "project", "status", "version", "created_by", "updated_at"]
    list_filter = ["status"]
    search_fields = ["dataset__name", "project__slug"]
    list_select_related = ["dataset", "project", "version", "created_by"]
    inlines = [UploadFileInline]


@admin.register(Blob)
class BlobAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Blobs are shared by every project's versions, so only superusers see them (no project scopes one)."""

    list_display = ["sha256", "size", "created_at"]
    search_fields = ["sha256"]
    show_full_result_count = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
