"""The drift monitor form (the service checks the values: apps/monitoring/services.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.monitoring.data import dataset_choices
from apps.monitoring.models import DriftMonitor
from apps.serving.models import InferenceService
from portal.lib.forms import StyledFormMixin


class MonitorForm(StyledFormMixin, forms.Form):
    service = forms.ChoiceField(label=_("Service"))
    reference_version = forms.ChoiceField(
        label=_("Reference data"),
        required=False,
        help_text=_("Empty: the dataset version the served model was trained on, found through lineage."),
    )
    target_column = forms.CharField(
        label=_("Target column"), required=False, max_length=200,
        help_text=_("The reference's label column, left out of the comparison."),
    )  # fmt: skip
    threshold = forms.CharField(
        label=_("Threshold"), initial="0.2", max_length=10,
        help_text=_("A report whose largest feature PSI reaches it is drifted (0.1 moderate, 0.2 significant)."),
    )  # fmt: skip
    window_hours = forms.CharField(label=_("Window (hours)"), initial="24", max_length=5)
    min_rows = forms.CharField(
        label=_("Minimum rows"), initial="30", max_length=7, help_text=_("Fewer logged rows skip the check.")
    )
    interval_minutes = forms.CharField(label=_("Check every (minutes)"), initial="60", max_length=6)
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, project: Any, *args: Any, monitor: DriftMonitor | None = None, **kwargs: Any) -> None:
        if monitor is not None:
            kwargs.setdefault("initial", {
                "service": str(monitor.service_id), "reference_version": str(monitor.reference_version_id or ""),
                "target_column": monitor.target_column, "threshold": f"{monitor.threshold:g}",
                "window_hours": monitor.window_hours, "min_rows": monitor.min_rows,
                "interval_minutes": monitor.interval_minutes, "enabled": monitor.enabled,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        names = InferenceService.objects.filter(project=project).order_by("name").values_list("pk", "name")
        self.fields["service"].choices = [(str(pk), name) for pk, name in names]
        self.fields["reference_version"].choices = [
            ("", _("Through lineage")),
            *((str(pk), ref) for pk, ref in dataset_choices(project)),
        ]
        if monitor is not None:
            del self.fields["service"]

    def settings(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data.pop("service", None)
        data["reference_version"] = data.get("reference_version") or None
        return data
