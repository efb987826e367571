"""Forms of the cluster pages (staff only). The kubeconfig is write-only: it is never put back into a form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.projects.models import Project
from apps.runtime.models import Cluster, Operator
from portal.lib.forms import StyledFormMixin


class SecretTextarea(forms.Textarea):
    """A textarea that renders empty whatever it holds, like PasswordInput(render_value=False): a kubeconfig, stored
    or just typed into a form that came back with errors, never goes back to the browser."""

    def format_value(self, value: Any) -> None:
        return None


class ClusterForm(StyledFormMixin, forms.ModelForm):
    """Create or change a cluster. `kubeconfig` is not a model field of the form, so the stored one is never
    rendered; left empty on an edit, the service keeps it."""

    kubeconfig = forms.CharField(
        label=_("Kubeconfig"),
        required=False,
        widget=SecretTextarea(attrs={"rows": 12, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_(
            "YAML with the cluster's address and credentials, stored encrypted and never shown again (after an error,"
            " paste it again). Not needed in-cluster."
        ),
    )
    operators = forms.MultipleChoiceField(
        label=_("Installed operators"), choices=Operator.choices, required=False, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = Cluster
        fields = [
            "name", "description", "enabled", "in_cluster", "context", "version", "default_namespace",
            "operators", "node_selector", "resource_group_label", "gpu_resource", "gpu_type_label", "vgpu_resources",
            "rdma_resource", "volcano_queue", "priority_classes", "placement", "pack_scheduler_name",
            "work_volume_claim",
        ]  # fmt: skip
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        # The model's fields have no verbose names (a migration each): the page's words are here.
        labels = {
            "name": _("Name"),
            "description": _("Description"),
            "enabled": _("Enabled"),
            "in_cluster": _("In-cluster"),
            "context": _("Context"),
            "version": _("Kubernetes version"),
            "default_namespace": _("Default namespace"),
            "node_selector": _("Node selector"),
            "resource_group_label": _("Resource group label"),
            "gpu_resource": _("GPU resource"),
            "gpu_type_label": _("GPU type label"),
            "vgpu_resources": _("vGPU resources"),
            "rdma_resource": _("RDMA resource"),
            "volcano_queue": _("Volcano queue"),
            "priority_classes": _("Priority classes installed"),
            "placement": _("Placement"),
            "pack_scheduler_name": _("Packing scheduler"),
            "work_volume_claim": _("Work volume claim"),
        }

    # `kubeconfig` is not in Meta.fields, so the model form neither fills it from the instance (a stored one
    # never reaches the browser) nor copies it onto the instance (the service decides whether to keep it).
    field_order = ["name", "description", "enabled", "in_cluster", "kubeconfig", "context"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # Workloads, manifests and the CLI refer to a cluster by name.
            self.fields["name"].disabled = True
            if self.instance.kubeconfig:
                self.fields["kubeconfig"].help_text = _(
                    "A kubeconfig is stored (encrypted, not shown). Leave this empty to keep it, or paste a new one."
                )
        self._style_checkboxes()

    def _style_checkboxes(self) -> None:
        self.fields["operators"].widget.attrs["class"] = "form-check-input"
        self.fields["kubeconfig"].widget.attrs["class"] += " font-monospace"

    def full_clean(self) -> None:
        super().full_clean()
        self._style_checkboxes()

    def clean_node_selector(self) -> dict:
        return self.cleaned_data.get("node_selector") or {}

    def clean_vgpu_resources(self) -> dict:
        return self.cleaned_data.get("vgpu_resources") or {}

    def validate_unique(self) -> None:  # the service says it, once for pages, API and admin
        pass


class BindingForm(StyledFormMixin, forms.Form):
    """Bind a project to a cluster (or change its namespace / default)."""

    project = forms.ModelChoiceField(
        label=_("Project"), queryset=Project.objects.order_by("name"), to_field_name="slug", empty_label=None
    )
    namespace = forms.CharField(
        label=_("Namespace"), required=False, max_length=63, help_text=_("Empty: the cluster's default namespace.")
    )
    is_default = forms.BooleanField(label=_("Default cluster of the project"), required=False)
