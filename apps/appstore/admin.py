"""Admin of the app store. The catalogue (apps and their immutable versions) has no project to scope it, so only
superusers see it; they approve a published app for everyone by making it public. Installations are project rows
the install service writes: read-only, with what they created inline, and uninstalled through the same service."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.appstore import services
from apps.appstore.models import App, AppVersion, Installation, InstalledObject
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class SuperuserOnlyMixin:
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser


class AppVersionInline(ReadOnlyTabularInline):
    model = AppVersion
    fields = ["version", "digest", "created_at"]


@admin.register(App)
class AppAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    list_display = ["name", "project", "visibility", "approved", "builtin", "created_at"]
    list_filter = ["visibility", "approved", "builtin"]
    search_fields = ["name", "project__slug"]
    fields = ["name", "project", "builtin", "visibility", "approved", "shared_with", "created_at"]
    readonly_fields = ["name", "project", "builtin", "visibility", "shared_with", "created_at"]
    actions = ["approve"]

    @admin.action(description=_("Approve the selected public apps for everyone"))
    def approve(self, request: HttpRequest, queryset: QuerySet[App]) -> None:
        count = queryset.filter(visibility=App.Visibility.PUBLIC).update(approved=True)
        messages.info(request, _("Approved %(n)d apps.") % {"n": count})

    inlines = [AppVersionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # apps come from bundles (services.add_version)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(AppVersion)
class AppVersionAdmin(SuperuserOnlyMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["app", "version", "digest", "created_at"]
    search_fields = ["app__name", "version", "digest"]
    fields = ["app", "version", "digest", "manifest", "readme", "created_at"]  # the zip's bytes are not shown


class InstalledObjectInline(ReadOnlyTabularInline):
    model = InstalledObject
    fields = ["position", "kind", "name", "content_type", "object_id"]


@admin.register(Installation)
class InstallationAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "app_version", "created_by", "created_at"]
    search_fields = ["name", "project__slug", "app_version__app__name"]
    list_select_related = ["project", "app_version__app", "created_by"]
    fields = ["project", "name", "app_version", "parameters", "created_by", "created_at", "updated_at"]
    inlines = [InstalledObjectInline]
    actions = ["uninstall"]

    @admin.action(description=_("Uninstall the selected installations (data is kept)"))
    def uninstall(self, request: HttpRequest, queryset: QuerySet[Installation]) -> None:
        count = 0
        for installation in queryset:
            services.uninstall(installation)
            count += 1
        messages.info(request, _("Uninstalled %(n)d installations.") % {"n": count})
