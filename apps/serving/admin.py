"""Admin of inference services: settings editable; revisions and replicas read-only records. The stop action goes
through the same service as the pages (replicas stopped, revisions kept)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.projects.admin import ReadOnlyAdminMixin, TenantAdminMixin
from apps.serving import services
from apps.serving.models import InferenceService, PayloadLog, Replica, Revision


class RevisionInline(admin.TabularInline):
    model = Revision
    fk_name = "service"
    fields = ["number", "role", "status", "model_version", "desired_replicas", "created_by", "created_at", "reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(InferenceService)
class InferenceServiceAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "status", "stage", "framework", "current_revision", "updated_at"]
    list_filter = ["status", "stage", "framework", "auth"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project", "current_revision"]
    readonly_fields = [
        "status", "reason", "current_revision", "canary_revision", "canary_percent", "shadow_revision",
        "shadow_percent", "key_prefix", "key_digest", "runtime", "created_by", "created_at", "updated_at",
    ]  # fmt: skip
    raw_id_fields = ["registered_model", "model_version"]
    inlines = [RevisionInline]
    actions = ["stop"]

    @admin.action(description=_("Stop the selected services (their revisions are kept)"))
    def stop(self, request: HttpRequest, queryset: QuerySet[InferenceService]) -> None:
        for service in queryset:
            services.stop_service(service, reason=str(_("stopped by an administrator")))
        messages.info(request, _("Stopping %(n)d services.") % {"n": queryset.count()})


class ReplicaInline(admin.TabularInline):
    model = Replica
    fields = ["index", "status", "handle", "upstream", "started_at", "ready_at", "stopped_at", "reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Revision)
class RevisionAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "role", "status", "model_version", "created_at"]
    list_filter = ["status", "role"]
    search_fields = ["service__name", "service__project__slug"]
    list_select_related = ["service", "model_version"]
    inlines = [ReplicaInline]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # an immutable record

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(PayloadLog)
class PayloadLogAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    """Logged requests (the router writes them; credentials were never logged)."""

    list_display = ["request_id", "service", "revision", "status", "created_at", "labelled_at"]
    list_filter = ["status"]
    search_fields = ["request_id", "service__name", "service__project__slug"]
    list_select_related = ["service", "revision"]
