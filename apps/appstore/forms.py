"""The install form: the installation's name and the app's parameters, generated from its JSON Schema."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.appstore.manifest import parameter_schema
from apps.appstore.models import App, AppVersion
from apps.jobs.forms import args_form_class
from apps.projects.models import Project
from portal.lib.forms import StyledFormMixin

PARAM_PREFIX = "param"


class InstallNameForm(StyledFormMixin, forms.Form):
    name = forms.CharField(
        label=_("Installation name"),
        max_length=50,
        help_text=_("Names what the app creates; install an app again under another name."),
    )


def parameter_form(version: AppVersion, name: str, data: Any = None) -> forms.Form:
    """The parameters form of `version` (defaults filled in for the installation `name`)."""
    form_class = args_form_class(parameter_schema(version.manifest, name))
    return form_class(data, prefix=PARAM_PREFIX)


def parameter_values(form: forms.Form) -> dict[str, Any]:
    """The values the user gave (empty ones left to the schema's defaults)."""
    return {key: value for key, value in form.cleaned_data.items() if value not in (None, "")}


class PublishForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("App name"), max_length=50, help_text=_("Lower-case letters, digits, hyphens."))
    version = forms.CharField(label=_("Version"), max_length=50, initial="1.0.0")
    title = forms.CharField(label=_("Title"), max_length=200)
    summary = forms.CharField(label=_("Summary"), max_length=300, required=False)
    visibility = forms.ChoiceField(label=_("Who sees it"), choices=App.Visibility.choices, initial="project")
    share_with = forms.CharField(
        label=_("Share with projects"),
        required=False,
        help_text=_("Project slugs, separated by commas (when shared)."),
    )

    def clean_share_with(self) -> list[Project]:
        slugs = [s.strip() for s in self.cleaned_data["share_with"].split(",") if s.strip()]
        found = {p.slug: p for p in Project.objects.filter(slug__in=slugs)}
        unknown = [s for s in slugs if s not in found]
        if unknown:
            raise forms.ValidationError(_("No project %(slugs)s.") % {"slugs": ", ".join(unknown)})
        return [found[s] for s in slugs]


class NotebookPublishForm(PublishForm):
    """Publishing a notebook: which files of its owner's folder go with it (copied into the installer's folder)."""

    files = forms.MultipleChoiceField(
        label=_("Starter files"), widget=forms.CheckboxSelectMultiple, help_text=_("From the notebook owner's folder.")
    )

    def __init__(self, *args: Any, paths: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["files"].choices = [(p, p) for p in paths]
