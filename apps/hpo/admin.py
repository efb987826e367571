"""Admin of studies: read-only (the services write them and Optuna's storage must agree), trials as a read-only inline,
a `stop` action through the same service as the pages."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.hpo import services
from apps.hpo.models import Study, Trial
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class TrialInline(ReadOnlyTabularInline):
    model = Trial
    fields = ["number", "status", "values", "params", "run", "reason", "created_at", "finished_at"]


@admin.register(Study)
class StudyAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "algorithm", "early_stopping", "status", "max_trials", "created_at"]
    list_filter = ["status", "algorithm", "early_stopping"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]
    inlines = [TrialInline]
    actions = ["stop"]

    @admin.action(description=_("Stop the selected studies (running trials are cancelled)"))
    def stop(self, request: HttpRequest, queryset: QuerySet[Study]) -> None:
        for study in queryset:
            services.stop_study(study, reason=str(_("Stopped by an administrator.")))
        messages.info(request, _("Stopped %(n)d studies.") % {"n": queryset.count()})


@admin.register(Trial)
class TrialAdmin(ReadOnlyAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["study", "number", "status", "values", "run", "created_at"]
    list_filter = ["status"]
    search_fields = ["study__name", "study__project__slug"]
    list_select_related = ["study", "study__project", "run"]
