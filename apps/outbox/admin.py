from django.contrib import admin

from apps.outbox.models import PendingTask


@admin.register(PendingTask)
class PendingTaskAdmin(admin.ModelAdmin):
    """Read-only: what committed writes queued and the broker has not taken yet (a backlog means it was down)."""

    list_display = ("name", "args", "created_at", "due_at", "attempts", "last_error")
    readonly_fields = ("name", "args", "kwargs", "eta", "created_at", "due_at", "attempts", "last_error")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
