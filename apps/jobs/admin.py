"""Admin of the jobs app: images, with their registry password write-only (never rendered; empty keeps it); templates,
pipelines, runs and attempts to look at (they change through the services); schedules to pause and tune."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.jobs.forms import RegistryCredentialsForm
from apps.jobs.models import Image, JobTemplate, Pipeline, PipelineRun, Schedule, TaskRun
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


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


@admin.register(JobTemplate)
class JobTemplateAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    """Read-only: a change makes the next version (`services.create_template`); built-ins come from
    `apps/jobs/builtin_templates`. The built-ins (no project) are listed for every staff member."""

    list_display = ["slug", "version", "name", "project", "category", "kind", "framework", "created_at"]
    list_filter = ["kind", "category", "framework"]
    search_fields = ["slug", "name", "project__slug"]
    list_select_related = ["project"]


@admin.register(Pipeline)
class PipelineAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    """Read-only: a spec is validated by `services.save_pipeline` (the editor, the API, YAML imports)."""

    list_display = ["name", "project", "created_by", "updated_at"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project", "created_by"]


class TaskRunInline(ReadOnlyTabularInline):
    model = TaskRun
    fields = ["node", "attempt", "status", "reason", "exit_code", "runtime", "started_at", "finished_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.fields


@admin.register(PipelineRun)
class PipelineRunAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    """Read-only: runs move forward through the orchestrator; cancel and re-run are on the run page and the API."""

    list_display = ["__str__", "project", "status", "trigger", "created_by", "created_at", "finished_at"]
    list_filter = ["status", "trigger"]
    search_fields = ["pipeline_name", "project__slug"]
    list_select_related = ["project", "created_by"]
    date_hierarchy = "created_at"
    inlines = [TaskRunInline]


@admin.register(TaskRun)
class TaskRunAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "run", "node", "attempt", "status", "runtime", "started_at", "finished_at"]
    list_filter = ["status", "runtime"]
    search_fields = ["node", "run__pipeline_name", "run__project__slug", "handle"]
    list_select_related = ["run", "run__project"]
    exclude = ["api_token"]  # the attempt's token row; its secret is hashed, but it is nobody's business here


@admin.register(Schedule)
class ScheduleAdmin(TenantAdminMixin, admin.ModelAdmin):
    """Pause, resume or tune a schedule here; its cron, time zone and pipeline change through the API, which checks
    them (`schedules.save_schedule`)."""

    list_display = ["pipeline", "project", "cron", "timezone", "enabled", "last_logical_date"]
    list_filter = ["enabled", "catchup"]
    search_fields = ["pipeline__name", "project__slug", "cron"]
    list_select_related = ["pipeline", "project"]
    readonly_fields = ["project", "pipeline", "cron", "timezone", "start_date", "last_logical_date", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
