"""Admin for projects. Staff who are not superusers see only their projects' rows; others are 404."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects import permissions, services
from apps.projects.models import Membership, Project, ProjectSecret, Quota


class TenantAdminMixin:
    """Restricts an admin to `Model.objects.for_user(...)`: rows of other projects do not exist (404).

    Writes need the project permission `write_perm`; every tenant-owned model's admin uses this.
    """

    write_perm = permissions.CONTRIBUTE

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)  # type: ignore[misc]
        return qs if request.user.is_superuser else qs.for_user(request.user)

    def _object_or_404(self, request: HttpRequest, object_id: str | None) -> Any:
        if object_id is None:
            return None
        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]
        if obj is None:
            raise Http404
        return obj

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)  # type: ignore[misc]

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]

    def history_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and not request.user.is_superuser:
            return permissions.has_project_perm(request.user, obj.project, self.write_perm)
        return super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and not request.user.is_superuser:
            return permissions.has_project_perm(request.user, obj.project, self.write_perm)
        return super().has_delete_permission(request, obj)  # type: ignore[misc]


class ReadOnlyAdminMixin:
    """An admin that shows records the portal writes through its services (runs, versions, uploads): nothing is
    added, changed or deleted here, where no service would keep the rows consistent."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyTabularInline(ReadOnlyAdminMixin, admin.TabularInline):
    """A parent's child rows, read-only (tags, attempts, usages); every field shown."""

    extra = 0
    show_change_link = True

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.concrete_fields if f.name != "id"]


class QuotaInline(admin.StackedInline):
    model = Quota
    can_delete = False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["user", "role", "created_at"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # roles change through the members page/API so that permissions stay in sync


@admin.register(Project)
class ProjectAdmin(TenantAdminMixin, admin.ModelAdmin):
    """Object permissions are never edited here: they follow roles (apps.projects.permissions)."""

    write_perm = permissions.CHANGE
    list_display = ["name", "slug", "created_by", "created_at"]
    search_fields = ["name", "slug"]
    inlines = [QuotaInline, MembershipInline]
    readonly_fields = ["created_by", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*self.readonly_fields, "slug"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new project goes through the service: owner membership, quota and grants included.
        created = services.create_project(request.user, slug=obj.slug, name=obj.name, description=obj.description)
        obj.pk = created.pk
        obj._state.adding = False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)


@admin.register(Membership)
class MembershipAdmin(TenantAdminMixin, admin.ModelAdmin):
    write_perm = permissions.MANAGE_MEMBERS
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["role"]
    list_select_related = ["project", "user"]
    search_fields = ["project__name", "user__username"]
    readonly_fields = ["project", "user", "role", "created_at"]
    inlines: list = []  # accounts adds how single sign-on granted it (apps/accounts/admin.py)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Quota)
class QuotaAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = [
        "project", "cpu_cores", "memory_bytes", "gpus", "concurrent_runs", "concurrent_tasks", "storage_bytes",
    ]  # fmt: skip
    list_select_related = ["project"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser  # quotas are the platform's to set

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class ProjectSecretAdminForm(forms.ModelForm):
    """The value is write-only: the field is never filled from the stored value; left empty on a change, it keeps
    it. `value` is excluded from the model form, so nothing renders or overwrites it except `save` below."""

    new_value = forms.CharField(
        label=_("value"),
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False),
        help_text=_("Write-only. Leave empty to keep the stored value."),
    )

    class Meta:
        model = ProjectSecret
        fields = ["project", "name", "description"]

    def clean_new_value(self) -> str:
        value = self.cleaned_data.get("new_value", "")
        if not value and self.instance.pk is None:
            raise forms.ValidationError(_("A secret needs a value."))
        return value

    def save(self, commit: bool = True) -> ProjectSecret:
        if self.cleaned_data.get("new_value"):
            self.instance.value = self.cleaned_data["new_value"]
            self.instance.updated_at = timezone.now()
        return super().save(commit)


@admin.register(ProjectSecret)
class ProjectSecretAdmin(TenantAdminMixin, admin.ModelAdmin):
    form = ProjectSecretAdminForm
    fields = ["project", "name", "new_value", "description", "created_by", "created_at", "updated_at"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    list_display = ["name", "project", "description", "updated_at"]
    list_select_related = ["project"]
    search_fields = ["name", "project__slug"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The name is fixed once created: pipelines reference it.
        return [*self.readonly_fields, "project", "name"] if obj is not None else self.readonly_fields

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "project" and not request.user.is_superuser:
            kwargs["queryset"] = permissions.projects_for(request.user, self.write_perm)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ProjectSecret, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
