"""Page forms of channels and rules: field types and widgets; the services check the rules (add_service_errors)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.alerts.kinds import KINDS, kind_choices
from apps.alerts.models import Channel
from portal.lib.forms import StyledFormMixin


class ChannelForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=80)
    kind = forms.ChoiceField(label=_("Kind"), choices=Channel.Kind.choices)
    recipients = forms.CharField(
        label=_("Recipients"), required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("In-app: usernames, email: addresses, separated by commas; empty: every member of the project."),
    )  # fmt: skip
    url = forms.CharField(
        label=_("Webhook URL"), required=False, max_length=2000, widget=forms.PasswordInput(render_value=False),
        help_text=_("Stored encrypted, never shown again. Editing: leave empty to keep the stored one."),
    )  # fmt: skip
    secret = forms.CharField(
        label=_("Signing secret"), required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text=_("DingTalk: the robot's SEC… secret. Generic webhook: the key of the X-Portal-Signature HMAC."),
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["kind"]

    def values(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data["url"] = data.get("url") or None  # empty keeps the stored one
        data["secret"] = data.get("secret") or None
        return data


def _param_fields() -> dict[str, forms.Field]:
    """One field per parameter name of any kind; each says which kinds use it."""
    users: dict[str, list[str]] = {}
    fields: dict[str, forms.Field] = {}
    for kind in KINDS.values():
        for param in kind.params:
            users.setdefault(param.name, []).append(str(kind.label))
            fields.setdefault(
                param.name,
                forms.CharField(label=str(param.label).capitalize(), required=False, initial=param.default),
            )
    kinds_of: dict[str, list[str]] = {}
    for kind in KINDS.values():
        for param in kind.params:
            kinds_of.setdefault(param.name, []).append(kind.name)
    for name, field in fields.items():
        field.help_text = _("Used by: %(kinds)s.") % {"kinds": "; ".join(users[name])}
        field.widget.attrs["data-kinds"] = " ".join(kinds_of[name])  # static/js/alerts.js shows the chosen kind's
    return fields


class RuleForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=80)
    kind = forms.ChoiceField(label=_("When"), choices=())
    channels = forms.ModelMultipleChoiceField(
        label=_("Send to"), queryset=Channel.objects.none(), required=False, widget=forms.CheckboxSelectMultiple
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args: Any, project: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kind"].choices = kind_choices()
        self.fields["channels"].queryset = Channel.objects.filter(project=project)
        self.param_names = []
        for name, field in _param_fields().items():
            self.fields[name] = field
            self.param_names.append(name)

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        kind = KINDS[data["kind"]]
        return {
            "name": data["name"],
            "kind": data["kind"],
            "params": {p.name: data.get(p.name) for p in kind.params if data.get(p.name) not in (None, "")},
            "channels": list(data["channels"]),
            "enabled": data["enabled"],
        }

    def put_errors(self, errors: dict[str, list[str]]) -> None:
        """A service's errors on the fields: "params.threshold" lands on `threshold`."""
        for key, messages in errors.items():
            target = key.split(".", 1)[1] if key.startswith("params.") else key
            self.add_error(target if target in self.fields else None, messages)
