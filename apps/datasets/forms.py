from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.datasets.models import Dataset


class DatasetForm(forms.ModelForm):
    tags = forms.CharField(label=_("Tags"), required=False, help_text=_("Comma-separated."))

    class Meta:
        model = Dataset
        fields = ["name", "description", "tags", "licence", "source"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["tags"] = ", ".join(self.instance.tags or [])
        for field in self.fields.values():
            field.widget.attrs.setdefault("class", "form-control")

    def clean_tags(self) -> list[str]:
        return [t.strip() for t in self.cleaned_data["tags"].split(",") if t.strip()]

    def validate_unique(self) -> None:  # the service says it, once for pages and API
        pass
