from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: the log is append-only, for the admin as for everyone."""

    list_display = ["created_at", "actor_repr", "action", "object_type", "object_repr", "project_repr", "ip", "status"]
    list_filter = ["action", "object_type", "method"]
    search_fields = ["actor_repr", "object_repr", "object_id", "project_repr", "path"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
