from __future__ import annotations

import json
import shlex
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.jobs.models import Image
from portal.lib.forms import StyledFormMixin


class PipelineYamlForm(StyledFormMixin, forms.Form):
    yaml = forms.CharField(
        label=_("Pipeline (YAML)"),
        widget=forms.Textarea(attrs={"rows": 22, "spellcheck": "false", "class": "font-monospace"}),
    )


class RerunForm(StyledFormMixin, forms.Form):
    node = forms.CharField(label=_("Node"), required=False)


def args_form_class(schema: dict) -> type[forms.Form]:
    """A form for a template's arguments, generated from its JSON Schema (types, choices, defaults)."""
    from apps.jobs.args import ordered_properties, portal_type

    required = set(schema.get("required", []))
    fields: dict[str, forms.Field] = {}
    for name, prop in ordered_properties(schema).items():
        kind = portal_type(prop)
        common = {
            "label": prop.get("title") or name,
            "required": name in required,
            "help_text": prop.get("description", ""),
            "initial": prop.get("default"),
        }
        if prop.get("enum"):
            # A form posts text: give back the schema's own value (4, not "4"), or the check fails on type.
            values = {str(choice): choice for choice in prop["enum"]}
            choices = [(key, key) for key in values]
            if name not in required:
                choices.insert(0, ("", "—"))
            fields[name] = forms.TypedChoiceField(
                choices=choices, coerce=values.__getitem__, empty_value=None, **common
            )
        elif kind == "int":
            fields[name] = forms.IntegerField(min_value=prop.get("minimum"), max_value=prop.get("maximum"), **common)
        elif kind == "float":
            fields[name] = forms.FloatField(min_value=prop.get("minimum"), max_value=prop.get("maximum"), **common)
        elif kind == "bool":
            fields[name] = forms.BooleanField(**{**common, "required": False})
        elif kind == "json":
            fields[name] = forms.JSONField(**common)
        elif kind == "text":
            fields[name] = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), **common)
        elif kind == "secret":
            fields[name] = forms.CharField(widget=forms.PasswordInput(render_value=True), **common)
        else:
            fields[name] = forms.CharField(**common)
    return type("ArgsForm", (StyledFormMixin, forms.Form), fields)


# --- Images: registry credentials (the password is write-only) ------------------------------------------------


def registry_credential_errors(registry: str, username: str, has_password: bool) -> dict[str, str]:
    """What is missing for credentials to become an imagePullSecret (one rule for forms, API and admin)."""
    errors: dict[str, str] = {}
    if has_password and not username:
        errors["registry_username"] = str(_("A registry password needs a username."))
    if (username or has_password) and not registry:
        errors["registry"] = str(_("Name the registry these credentials are for, e.g. registry.example.com."))
    return errors


class RegistryCredentialsForm(forms.ModelForm):
    """An image with registry credentials. The stored password is never rendered: left empty it is kept,
    `clear_registry_password` removes it. `registry_password` is not in Meta.fields, so the model form neither
    fills it from the instance nor copies it back; `save` decides."""

    registry_password = forms.CharField(
        label=_("Registry password"),
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=_("Stored encrypted and never shown. Leave empty to keep the stored one."),
    )
    clear_registry_password = forms.BooleanField(label=_("Remove the stored password"), required=False)

    class Meta:
        model = Image
        fields = ["name", "description", "registry", "registry_username"]

    def clean(self) -> dict:
        cleaned = super().clean()
        new, clear = cleaned.get("registry_password"), cleaned.get("clear_registry_password")
        if new and clear:
            self.add_error("clear_registry_password", _("Either type a new password or remove the stored one."))
        has_password = bool(new) or (bool(self.instance.registry_password) and not clear)
        errors = registry_credential_errors(
            cleaned.get("registry") or "", cleaned.get("registry_username") or "", has_password
        )
        for field, message in errors.items():
            self.add_error(field, message)
        return cleaned

    def save(self, commit: bool = True) -> Image:
        if self.cleaned_data.get("clear_registry_password"):
            self.instance.registry_password = ""
        elif self.cleaned_data.get("registry_password"):
            self.instance.registry_password = self.cleaned_data["registry_password"]
        return super().save(commit)


class ImageForm(StyledFormMixin, RegistryCredentialsForm):
    """The image form of the pages (the instance carries the project: its names are unique there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["description"].widget.attrs["rows"] = 2
        if self.instance.pk is None:  # nothing stored to keep or remove yet
            del self.fields["clear_registry_password"]
            self.fields["registry_password"].help_text = _("Stored encrypted and never shown.")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        same = Image.objects.filter(project=self.instance.project_id, name=name).exclude(pk=self.instance.pk)
        if self.instance.project_id and same.exists():
            raise forms.ValidationError(_("This project already has the image “%(name)s”.") % {"name": name})
        return name


class ScheduleForm(StyledFormMixin, forms.Form):
    """A new schedule of a pipeline (its cron and time zone are checked by jobs.schedules.save_schedule)."""

    cron = forms.CharField(
        label=_("Cron"), max_length=100, initial="0 3 * * *",
        help_text=_("minute hour day month weekday, e.g. “0 3 * * *” (every day at 03:00) or @hourly"),
    )  # fmt: skip
    timezone = forms.CharField(label=_("Time zone"), max_length=64, initial="UTC")
    catchup = forms.BooleanField(label=_("Catch up the runs missed while paused"), required=False)


class BackfillForm(StyledFormMixin, forms.Form):
    """Past dates to run a schedule for: every date it fires at from the first day to the last, both included."""

    start = forms.DateField(label=_("From"), widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(label=_("To"), widget=forms.DateInput(attrs={"type": "date"}))


class TemplateForm(StyledFormMixin, forms.Form):
    """A project's own job template, as people type it. `data()` turns it into what the API takes; the API's
    serializer and jobs.services.create_template check it (one set of rules for both)."""

    slug = forms.SlugField(
        label=_("Slug"), max_length=100, help_text=_("Pipelines name it; a slug that exists gets a new version.")
    )
    name = forms.CharField(label=_("Name"), max_length=200)
    category = forms.CharField(label=_("Category"), max_length=100, initial="general")
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2}))
    image = forms.CharField(label=_("Image"), max_length=200, initial="python:3.11-slim",
                            widget=forms.TextInput(attrs={"list": "template-images"}))  # fmt: skip
    command = forms.CharField(
        label=_("Command"), max_length=2000, widget=forms.TextInput(attrs={"class": "font-monospace"}),
        help_text=_("The entrypoint, as a shell would split it, e.g. python train.py; arguments follow as --flags."),
    )  # fmt: skip
    args_schema = forms.CharField(
        label=_("Argument schema (JSON Schema)"), required=False, initial='{"type": "object", "properties": {}}',
        widget=forms.Textarea(attrs={"rows": 6, "class": "font-monospace", "spellcheck": "false"}),
    )  # fmt: skip
    cpu = forms.CharField(label=_("CPU"), required=False, max_length=20, initial="1")
    memory = forms.CharField(label=_("Memory"), required=False, max_length=20, initial="1Gi")
    gpu = forms.CharField(label=_("GPU"), required=False, max_length=20, initial="0")
    side_effects = forms.BooleanField(
        label=_("Has side effects (never taken from the cache)"), required=False,
        help_text=_("For steps that register, deploy or notify."),
    )  # fmt: skip
    preemptible = forms.BooleanField(
        label=_("Preemptible (may be stopped and rerun from the start)"), required=False,
        help_text=_("Its tasks may then use idle capacity above the project's quota, and be requeued when another "
                    "project needs it back (where the queue borrows: docs/scheduling.md)."),
    )  # fmt: skip

    def clean_command(self) -> list[str]:
        try:
            parts = shlex.split(self.cleaned_data["command"])
        except ValueError as exc:
            raise forms.ValidationError(_("The command cannot be split: %(e)s") % {"e": exc}) from None
        if not parts:
            raise forms.ValidationError(_("Give the command to run."))
        return parts

    def clean_args_schema(self) -> dict:
        text = self.cleaned_data.get("args_schema", "").strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(_("Not JSON: %(e)s") % {"e": exc}) from None
        if not isinstance(value, dict):
            raise forms.ValidationError(_("Give a JSON object."))
        return value

    def data_for_api(self, project_slug: str) -> dict:
        data = dict(self.cleaned_data)
        resources = {key: data.pop(key) for key in ("cpu", "memory", "gpu")}
        data["resources"] = {key: value for key, value in resources.items() if value not in ("", None)}
        return {**data, "project": project_slug}
