"""Forms of the labeling pages. Values are checked by the services (one set of messages for pages and API)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.datasets.models import DatasetVersion
from apps.labeling.models import LabelingProject
from portal.lib.forms import StyledFormMixin


class VersionChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: DatasetVersion) -> str:
        return f"{obj.ref} ({obj.file_count} files)"


class LabelingProjectForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    dataset_version = VersionChoice(label=_("Dataset version"), queryset=DatasetVersion.objects.none())
    kind = forms.ChoiceField(label=_("Kind"), choices=LabelingProject.Kind.choices)
    labels = forms.CharField(
        label=_("Labels"), required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("One per line (every kind but Label Studio XML)."),
    )  # fmt: skip
    text_column = forms.CharField(
        label=_("Text column"), required=False, max_length=200,
        help_text=_("For CSV and JSONL files: the column holding the text. Plain .txt files: one task per line."),
    )  # fmt: skip
    label_config = forms.CharField(
        label=_("Label Studio XML"), required=False,
        widget=forms.Textarea(attrs={"rows": 8, "class": "font-monospace"}),
        help_text=_("Only for the kind “Label Studio XML”; Label Studio validates it."),
    )  # fmt: skip
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, project=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset_version"].queryset = DatasetVersion.objects.filter(
            dataset__project=project
        ).select_related("dataset")

    def clean_labels(self) -> list[str]:
        return [line for line in self.cleaned_data["labels"].splitlines() if line.strip()]
