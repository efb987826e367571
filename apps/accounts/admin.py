from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.accounts.models import ApiToken, Notification, SsoMembership, User
from apps.projects.admin import MembershipAdmin, ReadOnlyTabularInline

admin.site.register(User, UserAdmin)


class OwnRowsAdmin(admin.ModelAdmin):
    """Staff see their own rows; superusers see everyone's."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)
        return qs if request.user.is_superuser else qs.filter(user=request.user)


@admin.register(ApiToken)
class ApiTokenAdmin(OwnRowsAdmin):
    list_display = [
        "name",
        "user",
        "prefix",
        "project",
        "scope",
        "kind",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["kind", "scope"]
    list_select_related = ["user", "project"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["user", "kind", "prefix", "digest", "created_at", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token's raw value is shown once: create it on the tokens page or API


@admin.register(Notification)
class NotificationAdmin(OwnRowsAdmin):
    list_display = ["user", "message", "created_at", "read_at"]
    list_select_related = ["user"]


class SsoMembershipInline(ReadOnlyTabularInline):
    """Whether single sign-on granted the membership (and follows the IdP's groups), and from which groups."""

    model = SsoMembership
    show_change_link = False


# A membership's page shows how single sign-on granted it; accounts is above projects, so it adds the inline.
MembershipAdmin.inlines = [*MembershipAdmin.inlines, SsoMembershipInline]
