"""Admin of drift monitors (settings editable, as on the page) and their reports (read-only records)."""

from __future__ import annotations

from django.contrib import admin

from apps.monitoring.models import DriftMonitor, DriftReport
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class DriftReportInline(ReadOnlyTabularInline):
    model = DriftReport
    fields = ["created_at", "status", "score", "threshold", "current_rows", "reference_version", "message"]


@admin.register(DriftMonitor)
class DriftMonitorAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["service", "project", "enabled", "threshold", "interval_minutes", "last_run_at"]
    list_filter = ["enabled"]
    search_fields = ["service__name", "project__slug"]
    list_select_related = ["service", "project"]
    raw_id_fields = ["service", "reference_version"]
    readonly_fields = ["next_run_at", "last_run_at", "created_by", "created_at"]


@admin.register(DriftReport)
class DriftReportAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["monitor", "created_at", "status", "score", "current_rows"]
    list_filter = ["status"]
    search_fields = ["monitor__service__name", "monitor__project__slug"]
    list_select_related = ["monitor__service"]
