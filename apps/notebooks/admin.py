"""Admin of notebooks: settings editable, runtime state read-only (the token never shown); admin actions stop
through the same service as the pages, so files are kept and the API token revoked."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.projects.admin import TenantAdminMixin


@admin.register(Notebook)
class NotebookAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "owner", "ide", "status", "last_activity", "started_at"]
    list_filter = ["status", "ide", "runtime"]
    search_fields = ["name", "project__slug", "owner__username"]
    list_select_related = ["project", "owner"]
    fields = [
        "project", "owner", "name", "ide", "image", "cpu", "memory_bytes", "gpu", "idle_timeout",
        "status", "reason", "runtime", "handle", "upstream", "started_at", "stopped_at", "last_activity",
        "idle_warned_at", "log_tail", "created_at",
    ]  # fmt: skip
    readonly_fields = [
        "status", "reason", "runtime", "handle", "upstream", "started_at", "stopped_at", "last_activity",
        "idle_warned_at", "log_tail", "created_at",
    ]  # fmt: skip
    actions = ["stop"]

    @admin.action(description=_("Stop the selected notebooks (files are kept)"))
    def stop(self, request: HttpRequest, queryset: QuerySet[Notebook]) -> None:
        for notebook in queryset:
            services.stop_notebook(notebook, reason=str(_("stopped by an administrator")))
        messages.info(request, _("Stopping %(n)d notebooks.") % {"n": queryset.count()})
