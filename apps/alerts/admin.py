"""Admin of alerts: channels and rules are created on the pages and the API (their services check them); here staff
turn them on or off and send a channel's test message. Webhook URLs and secrets are never shown. What fired and
what was sent are read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.alerts import services
from apps.alerts.models import AlertEvent, AlertRule, Channel, Delivery
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class _NoAddMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Channel)
class ChannelAdmin(_NoAddMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "kind", "enabled", "created_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]
    fields = ["project", "name", "kind", "recipients", "enabled", "created_by", "created_at", "updated_at"]
    readonly_fields = ["project", "name", "kind", "recipients", "created_by", "created_at", "updated_at"]
    actions = ["send_test"]

    @admin.action(description=_("Send a test message to the selected channels"))
    def send_test(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        for channel in queryset:
            services.send_test(channel)
        messages.info(request, _("Queued %(n)d test messages.") % {"n": queryset.count()})


@admin.register(AlertRule)
class AlertRuleAdmin(_NoAddMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "kind", "enabled", "last_evaluated_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]
    fields = ["project", "name", "kind", "params", "channels", "enabled", "created_by", "created_at",
              "last_evaluated_at"]  # fmt: skip
    readonly_fields = ["project", "name", "kind", "params", "channels", "created_by", "created_at",
                       "last_evaluated_at"]  # fmt: skip

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        services.update_rule(AlertRule.objects.get(pk=obj.pk), enabled=obj.enabled)


class DeliveryInline(ReadOnlyTabularInline):
    model = Delivery
    fields = ["channel", "kind", "status", "attempts", "error", "created_at", "sent_at"]


@admin.register(AlertEvent)
class AlertEventAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["rule", "project", "subject", "status", "count", "started_at", "resolved_at"]
    list_filter = ["status"]
    search_fields = ["rule__name", "subject", "project__slug"]
    list_select_related = ["rule", "project"]
    inlines = [DeliveryInline]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["channel", "project", "kind", "status", "attempts", "created_at", "sent_at"]
    list_filter = ["status", "kind"]
    search_fields = ["channel__name", "project__slug"]
    list_select_related = ["channel", "project"]
