"""The install form: the installation's name and the app's parameters, generated from its JSON Schema."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.appstore.manifest import parameter_schema
from apps.appstore.models import AppVersion
from apps.jobs.forms import args_form_class
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
