"""Study pages' forms: a study from fields (the space and the trial template as YAML), a whole study as YAML, and the
name to register the best trial's model under. The service checks what they hold (apps/hpo/services.py)."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.utils.translation import gettext_lazy as _

from apps.hpo.models import Algorithm, EarlyStopping
from portal.lib.forms import StyledFormMixin

EXAMPLE_SPACE = """C: {type: float, low: 0.001, high: 100, log: true}
"""
EXAMPLE_TEMPLATE = """job_template: sklearn-train
args: {c: "${trial.C}", label_column: species}
"""


def parse_yaml(text: str, field: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise forms.ValidationError(_("Not valid YAML: %(error)s") % {"error": exc}) from None


class StudyForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=80)
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2}))
    metric = forms.CharField(label=_("Objective metric"), max_length=250, help_text=_("What the trials log."))
    direction = forms.ChoiceField(
        label=_("Direction"), choices=[("maximize", _("Maximise")), ("minimize", _("Minimise"))]
    )
    extra_objectives = forms.CharField(
        label=_("More objectives"), required=False, help_text=_("For a multi-objective study: metric:direction, …")
    )
    space = forms.CharField(
        label=_("Search space (YAML)"), widget=forms.Textarea(attrs={"rows": 6, "class": "font-monospace"}),
        initial=EXAMPLE_SPACE,
    )  # fmt: skip
    algorithm = forms.ChoiceField(label=_("Algorithm"), choices=Algorithm.choices, initial=Algorithm.TPE)
    early_stopping = forms.ChoiceField(label=_("Early stopping"), choices=EarlyStopping.choices, required=False)
    max_trials = forms.IntegerField(label=_("Max trials"), min_value=1, initial=10)
    parallel_trials = forms.IntegerField(label=_("Parallel trials"), min_value=1, initial=2)
    max_failed_trials = forms.IntegerField(label=_("Max failed trials"), min_value=0, initial=3)
    deadline = forms.DateTimeField(label=_("Deadline"), required=False, help_text=_("UTC, e.g. 2030-01-31 18:00"))
    template = forms.CharField(
        label=_("Trial template (YAML)"), widget=forms.Textarea(attrs={"rows": 5, "class": "font-monospace"}),
        initial=EXAMPLE_TEMPLATE,
        help_text=_("pipeline: <name> with args per node, or job_template: <slug> with args; use ${trial.<param>}."),
    )  # fmt: skip

    def clean_space(self) -> Any:
        return parse_yaml(self.cleaned_data["space"], "space")

    def clean_template(self) -> Any:
        return parse_yaml(self.cleaned_data["template"], "template")

    def clean_extra_objectives(self) -> list[dict[str, str]]:
        extra = []
        for item in filter(None, (p.strip() for p in self.cleaned_data["extra_objectives"].split(","))):
            metric, _sep, direction = item.partition(":")
            extra.append({"metric": metric.strip(), "direction": direction.strip() or "maximize"})
        return extra

    def document(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            "objectives": [{"metric": data["metric"], "direction": data["direction"]}, *data["extra_objectives"]],
            "space": data["space"],
            "algorithm": data["algorithm"],
            "early_stopping": data["early_stopping"] or "none",
            "budget": {
                "max_trials": data["max_trials"], "parallel_trials": data["parallel_trials"],
                "max_failed_trials": data["max_failed_trials"], "deadline": data["deadline"],
            },
            "trial_template": data["template"],
        }  # fmt: skip


# Where a service error keyed by the definition's fields shows on StudyForm.
FORM_FIELD_OF = {
    "objectives": "metric", "space": "space", "trial_template": "template", "budget.max_trials": "max_trials",
    "budget.parallel_trials": "parallel_trials", "budget.max_failed_trials": "max_failed_trials",
    "budget.deadline": "deadline", "early_stopping": "early_stopping",
}  # fmt: skip


class StudyYamlForm(StyledFormMixin, forms.Form):
    document = forms.CharField(
        label=_("Study (YAML)"), widget=forms.Textarea(attrs={"rows": 18, "class": "font-monospace"}),
        help_text=_("name, objectives, space, algorithm, early_stopping, budget, seed, trial_template (docs/hpo.md); "
                    "or a Katib Experiment (apiVersion kubeflow.org/v1beta1, kind Experiment)."),
    )  # fmt: skip

    def clean_document(self) -> Any:
        document = parse_yaml(self.cleaned_data["document"], "document")
        if not isinstance(document, dict):
            raise forms.ValidationError(_("Must be a YAML mapping."))
        return document


class RegisterBestForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Registered model"), max_length=250)


class RerunBestForm(StyledFormMixin, forms.Form):
    args = forms.CharField(
        label=_("Arguments to replace (YAML)"), required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "font-monospace"}),
        help_text=_("By node, e.g. {load: {dataset: iris-full@latest}}; the best trial's parameters stay."),
    )  # fmt: skip

    def clean_args(self) -> Any:
        value = parse_yaml(self.cleaned_data["args"], "args")
        return value if value is not None else {}
