"""Forms of the tracking and registry pages: the runs table's search box, aliases, model cards."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.models import search
from apps.models.errors import TrackingError
from apps.models.validation import validate_alias

ATTRIBUTE_COLUMNS = ("run_name", "status", "user_id", "start_time", "end_time")


class RunSearchForm(forms.Form):
    """The runs table's query string: MLflow filter, one order_by clause, chosen columns, page."""

    filter = forms.CharField(
        label=_("Filter"),
        required=False,
        max_length=4000,
        widget=forms.TextInput(attrs={"placeholder": "metrics.accuracy > 0.9 and params.model = 'rf'"}),
        help_text=_(
            "MLflow's search grammar: metrics.<key>, params.<key>, tags.<key>, attributes.<key> with =, !=, <, >, "
            "LIKE, IN …, joined with AND."
        ),
    )
    order = forms.CharField(label=_("Sort by"), required=False, max_length=600)
    page = forms.IntegerField(required=False, min_value=1)

    def clean_filter(self) -> str:
        text = self.cleaned_data["filter"].strip()
        try:
            search.parse_filter(text)
        except TrackingError as error:
            raise forms.ValidationError(error.message) from None
        return text

    def clean_order(self) -> str:
        text = self.cleaned_data["order"].strip()
        if text:
            try:
                entity, key, _ascending = search.parse_order_by(text)
            except TrackingError as error:
                raise forms.ValidationError(error.message) from None
            if entity == "attribute" and key not in search.RUN_STRING_ATTRIBUTES | search.RUN_NUMERIC_ATTRIBUTES:
                raise forms.ValidationError(_("Runs cannot be sorted by “%(key)s”.") % {"key": key})
            if entity not in ("attribute", "metric", "param", "tag"):
                raise forms.ValidationError(_("Runs cannot be sorted by “%(key)s”.") % {"key": text})
        return text


class AliasForm(forms.Form):
    """Point an alias at a version (creating or moving it), or delete it."""

    alias = forms.CharField(label=_("Alias"), max_length=255)
    version = forms.TypedChoiceField(label=_("Version"), coerce=int, required=False)
    action = forms.ChoiceField(choices=[("set", _("Set")), ("delete", _("Delete"))], initial="set")

    def __init__(self, *args, versions: list[int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [("", "—")] + [(v, f"v{v}") for v in versions]

    def clean_alias(self) -> str:
        alias = self.cleaned_data["alias"].strip()
        try:
            validate_alias(alias)
        except TrackingError as error:
            raise forms.ValidationError(error.message) from None
        return alias

    def clean(self) -> dict:
        data = super().clean()
        if data.get("action") == "set" and not data.get("version"):
            self.add_error("version", _("Choose the version the alias points at."))
        return data


class ModelCardForm(forms.Form):
    """The Markdown model card of a version (sections: intended use, metrics, data, limitations)."""

    model_card = forms.CharField(
        label=_("Model card (Markdown)"),
        required=False,
        max_length=100_000,
        widget=forms.Textarea(attrs={"rows": 16, "class": "font-monospace"}),
    )
