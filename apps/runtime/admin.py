"""Admin of the Kubernetes runtime: clusters (kubeconfig write-only), project bindings, workloads (read-only).

Clusters are platform objects, so the usual model permissions apply (no project scoping). Saving goes through
the same services as the pages and the API.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from apps.projects.admin import ReadOnlyAdminMixin
from apps.runtime import services
from apps.runtime.forms import ClusterForm, SecretTextarea
from apps.runtime.models import Agent, Cluster, KubeWorkload, LocalWorkload, ProjectCluster

# Env values of these names are credentials (the task's API token, passwords): never shown in the admin.
SECRET_NAME = re.compile(r"TOKEN|PASSWORD|SECRET|KEY|CREDENTIAL", re.IGNORECASE)


class ClusterAdminForm(forms.ModelForm):
    """The stored kubeconfig is never put into the page; empty keeps it (see services.save_cluster)."""

    kubeconfig = forms.CharField(
        label=_("Kubeconfig"),
        required=False,
        widget=SecretTextarea(attrs={"rows": 12, "cols": 100, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_("Stored encrypted and never shown. Leave empty to keep the stored one."),
    )

    class Meta:
        model = Cluster
        fields = ClusterForm.Meta.fields  # everything staff edit; the kubeconfig is the declared field above

    def validate_unique(self) -> None:  # the service says it (one message everywhere)
        pass

    def _post_clean(self) -> None:
        # After the model form has copied the fields onto the instance: the service checks the whole cluster.
        super()._post_clean()
        if self.errors:
            return
        try:
            services.validate_cluster(self.instance, self.cleaned_data.get("kubeconfig") or None)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, errors)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
    # The admin adds the declared `kubeconfig` to the generated form's Meta.fields; excluding the model field keeps
    # the model form from filling it from the instance or copying it back (the service decides).
    exclude = ["kubeconfig"]
    list_display = ["name", "version", "enabled", "in_cluster", "inventory_at", "binding_count"]
    list_filter = ["enabled", "in_cluster", "version"]
    search_fields = ["name", "description"]
    readonly_fields = ["inventory_at", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).prefetch_related("bindings")

    @admin.display(description=_("projects"))
    def binding_count(self, cluster: Cluster) -> int:
        return len(cluster.bindings.all())

    def get_readonly_fields(self, request: HttpRequest, obj: Cluster | None = None) -> list[str]:
        # Workloads and manifests refer to a cluster by name.
        return [*self.readonly_fields, "name"] if obj is not None else list(self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Cluster, form: ClusterAdminForm, change: bool) -> None:
        services.save_cluster(obj, kubeconfig=form.cleaned_data.get("kubeconfig") or None)

    def delete_model(self, request: HttpRequest, obj: Cluster) -> None:
        try:
            services.delete_cluster(obj)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)


@admin.register(ProjectCluster)
class ProjectClusterAdmin(admin.ModelAdmin):
    list_display = ["project", "cluster", "namespace", "is_default"]
    list_filter = ["cluster", "is_default"]
    search_fields = ["project__slug", "project__name", "cluster__name"]
    list_select_related = ["project", "cluster"]

    def get_readonly_fields(self, request: HttpRequest, obj: ProjectCluster | None = None) -> list[str]:
        return ["project", "cluster"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: ProjectCluster, form: forms.ModelForm, change: bool) -> None:
        # The service keeps one default binding per project.
        saved = services.bind_project(obj.project, obj.cluster, namespace=obj.namespace, is_default=obj.is_default)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: ProjectCluster) -> None:
        services.unbind_project(obj)


def redacted_spec(spec: Any) -> Any:
    """The workload spec with credential-like env values replaced (they are short-lived, but still secrets)."""
    if not isinstance(spec, dict):
        return spec
    env = spec.get("env")
    if isinstance(env, dict):
        spec = {**spec, "env": {k: ("•••" if SECRET_NAME.search(str(k)) else v) for k, v in env.items()}}
    return spec


@admin.register(KubeWorkload)
class KubeWorkloadAdmin(admin.ModelAdmin):
    """Read-only: workloads are written by the runtime and the controller only."""

    list_display = ["uid", "cluster", "namespace", "state", "created", "created_at", "finished_at"]
    list_filter = ["state", "cluster"]
    search_fields = ["uid", "namespace"]
    list_select_related = ["cluster"]
    date_hierarchy = "created_at"
    fields = [
        "uid", "cluster", "namespace", "state", "created", "cancel_requested", "exit_code", "reason", "replicas",
        "applied", "spec_shown", "created_at", "started_at", "finished_at",
    ]  # fmt: skip
    readonly_fields = fields

    @admin.display(description=_("spec"))
    def spec_shown(self, workload: KubeWorkload) -> str:
        return format_html("<pre>{}</pre>", json.dumps(redacted_spec(workload.spec), indent=2, sort_keys=True))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: agents register themselves and beat their heart (`manage.py runagent`)."""

    list_display = ["__str__", "kind", "address", "started_at", "heartbeat_at", "stopped_at"]
    list_filter = ["kind"]
    search_fields = ["hostname", "address"]


@admin.register(LocalWorkload)
class LocalWorkloadAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: workloads are written by the local runtime and its agent only."""

    list_display = ["uid", "agent", "state", "exit_code", "created_at", "finished_at"]
    list_filter = ["state"]
    search_fields = ["uid"]
    list_select_related = ["agent"]
    date_hierarchy = "created_at"
    fields = [
        "uid", "agent", "state", "cancel_requested", "exit_code", "reason", "pids", "usage", "spec_shown",
        "created_at", "started_at", "finished_at",
    ]  # fmt: skip
    readonly_fields = fields

    @admin.display(description=_("spec"))
    def spec_shown(self, workload: LocalWorkload) -> str:
        return format_html("<pre>{}</pre>", json.dumps(redacted_spec(workload.spec), indent=2, sort_keys=True))
