from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.jobs.models import RunStatus
from portal.lib.forms import StyledFormMixin


class PipelineYamlForm(StyledFormMixin, forms.Form):
    yaml = forms.CharField(
        label=_("Pipeline (YAML)"),
        widget=forms.Textarea(attrs={"rows": 22, "spellcheck": "false", "class": "font-monospace"}),
    )


class RunFilterForm(StyledFormMixin, forms.Form):
    status = forms.ChoiceField(label=_("Status"), choices=[("", _("Any status")), *RunStatus.choices], required=False)
    pipeline = forms.CharField(label=_("Pipeline"), required=False)


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
