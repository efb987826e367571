"""The retrain policy and data monitor forms (the services check the values: apps/retraining/services.py)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline
from apps.models.models import RegisteredModel
from apps.monitoring.models import DriftMonitor
from apps.retraining.models import DataMonitor, RetrainPolicy
from portal.lib.forms import StyledFormMixin


def _choices(queryset: Any, label: str = "name", empty: bool = False) -> list[tuple[str, str]]:
    rows = [(str(pk), text) for pk, text in queryset.values_list("pk", label)]
    return [("", "—"), *rows] if empty else rows


class PolicyForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    pipeline = forms.ChoiceField(label=_("Pipeline"))
    mode = forms.ChoiceField(label=_("Mode"), choices=RetrainPolicy.Mode.choices)
    dataset = forms.ChoiceField(label=_("Dataset"))
    dataset_argument = forms.CharField(
        label=_("Dataset argument"), required=False, max_length=200,
        help_text=_("node.argument that receives the new version (name@number), e.g. load.dataset."),
    )  # fmt: skip
    arguments = forms.CharField(
        label=_("Arguments"), required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=RetrainPolicy._meta.get_field("arguments").help_text,
    )  # fmt: skip
    registered_model = forms.ChoiceField(label=_("Registered model"))
    alias = forms.CharField(label=_("Champion alias"), initial="production", max_length=100)
    metric = forms.CharField(label=_("Metric"), initial="test_accuracy", max_length=250)
    higher_is_better = forms.BooleanField(label=_("Higher is better"), required=False, initial=True)
    margin = forms.CharField(label=_("Margin"), initial="0", max_length=20,
                             help_text=RetrainPolicy._meta.get_field("margin").help_text)  # fmt: skip
    require_approval = forms.BooleanField(label=_("Require a project admin's approval"), required=False)
    drift_monitor = forms.ChoiceField(label=_("Drift monitor"), required=False,
                                      help_text=RetrainPolicy._meta.get_field("drift_monitor").help_text)  # fmt: skip
    cooldown_minutes = forms.CharField(label=_("Cooldown (minutes)"), initial="60", max_length=6)
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, project: Any, *args: Any, policy: RetrainPolicy | None = None, **kwargs: Any) -> None:
        if policy is not None:
            kwargs.setdefault("initial", {
                "name": policy.name, "pipeline": str(policy.pipeline_id), "mode": policy.mode,
                "dataset": str(policy.dataset_id), "dataset_argument": policy.dataset_argument,
                "arguments": json.dumps(policy.arguments), "registered_model": str(policy.registered_model_id),
                "alias": policy.alias, "metric": policy.metric, "higher_is_better": policy.higher_is_better,
                "margin": f"{policy.margin:g}", "require_approval": policy.require_approval,
                "drift_monitor": str(policy.drift_monitor_id or ""), "cooldown_minutes": policy.cooldown_minutes,
                "enabled": policy.enabled,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.fields["pipeline"].choices = _choices(Pipeline.objects.filter(project=project).order_by("name"))
        self.fields["dataset"].choices = _choices(Dataset.objects.filter(project=project).order_by("name"))
        models = RegisteredModel.objects.filter(project=project).order_by("name")
        self.fields["registered_model"].choices = _choices(models)
        monitors = DriftMonitor.objects.filter(project=project).order_by("service__name")
        self.fields["drift_monitor"].choices = _choices(monitors, "service__name", empty=True)

    def clean_arguments(self) -> dict[str, Any]:
        text = self.cleaned_data.get("arguments") or ""
        try:
            return json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(_("Not JSON: %(e)s") % {"e": exc}) from None

    def settings(self) -> dict[str, Any]:
        return dict(self.cleaned_data)


class DataMonitorForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    dataset = forms.ChoiceField(label=_("Dataset"))
    policy = forms.ChoiceField(label=_("Retrain policy"))
    min_changed_percent = forms.CharField(label=_("Rows changed (%)"), initial="10", max_length=10)
    drift_threshold = forms.CharField(label=_("Feature drift threshold"), initial="0.2", max_length=10,
                                      help_text=DataMonitor._meta.get_field("drift_threshold").help_text)  # fmt: skip
    target_column = forms.CharField(label=_("Target column"), required=False, max_length=200)
    interval_minutes = forms.CharField(label=_("Retrain every (minutes)"), initial="0", max_length=8,
                                       help_text=DataMonitor._meta.get_field("interval_minutes").help_text)  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, project: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = _choices(Dataset.objects.filter(project=project).order_by("name"))
        self.fields["policy"].choices = _choices(RetrainPolicy.objects.filter(project=project).order_by("name"))

    def settings(self) -> dict[str, Any]:
        return dict(self.cleaned_data)
