from __future__ import annotations

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
    """The image form of the pages."""
