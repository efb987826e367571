"""Admin of continuous training: policies and data monitors editable (as on their pages), checks, retrainings and
decisions read-only records."""

from __future__ import annotations

from django.contrib import admin

from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin
from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy


@admin.register(RetrainPolicy)
class RetrainPolicyAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "pipeline", "registered_model", "alias", "metric", "require_approval", "enabled"]
    list_filter = ["enabled", "mode", "require_approval"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project", "pipeline", "registered_model"]
    raw_id_fields = ["pipeline", "dataset", "registered_model", "drift_monitor"]
    readonly_fields = ["created_by", "created_at"]


class DataCheckInline(ReadOnlyTabularInline):
    model = DataCheck
    fields = ["created_at", "version", "previous", "changed_percent", "score", "drifted", "triggered", "message"]


@admin.register(DataMonitor)
class DataMonitorAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "dataset", "policy", "min_changed_percent", "interval_minutes", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project", "dataset", "policy"]
    raw_id_fields = ["dataset", "policy"]
    readonly_fields = ["next_run_at", "created_by", "created_at"]
    inlines = [DataCheckInline]


@admin.register(DataCheck)
class DataCheckAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["monitor", "version", "created_at", "changed_percent", "score", "triggered"]
    list_filter = ["triggered"]
    search_fields = ["monitor__name", "monitor__project__slug"]


@admin.register(Retraining)
class RetrainingAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["policy", "project", "reason", "status", "run", "created_at"]
    list_filter = ["status", "reason"]
    search_fields = ["policy__name", "project__slug"]
    list_select_related = ["policy", "project", "run"]


@admin.register(PromotionDecision)
class PromotionDecisionAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["registered_model", "alias", "challenger", "champion", "metric", "challenger_value",
                    "champion_value", "basis", "outcome", "created_at", "rolled_back_at"]  # fmt: skip
    list_filter = ["outcome"]
    search_fields = ["registered_model__name", "project__slug"]
    list_select_related = ["registered_model", "challenger", "champion"]
