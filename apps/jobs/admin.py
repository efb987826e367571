"""Admin of the jobs app: images, with their registry password write-only (never rendered; empty keeps it)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from apps.jobs.forms import RegistryCredentialsForm
from apps.jobs.models import Image
from apps.projects.admin import TenantAdminMixin


@admin.register(Image)
class ImageAdmin(TenantAdminMixin, admin.ModelAdmin):
    form = RegistryCredentialsForm
    fields = ["project", "name", "description", "registry", "registry_username", "registry_password",
              "clear_registry_password", "created_at"]  # fmt: skip
    # The admin adds the declared `registry_password` to the generated form's Meta.fields; excluding the model
    # field keeps it from being filled from the instance or overwritten with an empty value (the form's save decides).
    exclude = ["registry_password"]
    readonly_fields = ["created_at"]
    list_display = ["name", "project", "registry", "registry_username", "has_password"]
    list_filter = ["registry"]
    search_fields = ["name", "registry", "project__slug"]
    list_select_related = ["project"]

    @admin.display(boolean=True, description=_("password"))
    def has_password(self, image: Image) -> bool:
        return bool(image.registry_password)
