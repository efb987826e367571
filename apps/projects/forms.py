from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.projects.models import Project, Role
from portal.lib.forms import StyledFormMixin


class ProjectCreateForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    slug = forms.CharField(
        label=_("Slug"), max_length=50, help_text=_("Used in URLs: lowercase letters, digits and hyphens.")
    )
    description = forms.CharField(label=_("Description"), widget=forms.Textarea(attrs={"rows": 3}), required=False)


class ProjectSettingsForm(StyledFormMixin, forms.Form):
    """A plain form, not a ModelForm: a ModelForm would validate the model's case-insensitive name
    constraint itself ("Constraint … is violated.") and write rejected input onto the project shown in
    the page header. Uniqueness is checked by the service, with the same message as the API.
    """

    name = forms.CharField(label=_("Name"), max_length=100)
    description = forms.CharField(label=_("Description"), widget=forms.Textarea(attrs={"rows": 4}), required=False)
    runtime = forms.ChoiceField(
        label=_("Where tasks run"),
        choices=Project._meta.get_field("runtime").choices,
        required=False,
        help_text=_("Kubernetes uses the clusters an administrator bound to this project, the default first."),
    )
    notebook_idle_timeout = forms.IntegerField(
        label=_("Notebook idle timeout (minutes)"),
        required=False,
        min_value=1,
        max_value=7 * 24 * 60,
        help_text=_(
            "Notebooks without kernel or terminal activity for this long are stopped (files are kept). "
            "Empty: the portal's default. A notebook may set its own."
        ),
    )

    @classmethod
    def for_project(cls, project: Project, data: Any = None) -> ProjectSettingsForm:
        initial = {"name": project.name, "description": project.description, "runtime": project.runtime}
        return cls(data, initial={**initial, "notebook_idle_timeout": project.notebook_idle_timeout})


def role_choices(include_owner: bool) -> list[tuple[str, str]]:
    return [(r.slug, r.label) for r in reversed(Role) if include_owner or r != Role.OWNER]


class RoleForm(StyledFormMixin, forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=role_choices(True))

    def __init__(self, *args: object, include_owner: bool = True, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = role_choices(include_owner)

    @property
    def chosen_role(self) -> Role:
        return Role.from_name(self.cleaned_data["role"])


class InviteForm(RoleForm):
    user = forms.CharField(
        label=_("Username or email"),
        max_length=254,
        widget=forms.TextInput(attrs={"placeholder": _("Username or email")}),
    )

    field_order = ["user", "role"]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["role"].initial = Role.EDITOR.slug  # the common case; owner is never the default


class TransferForm(StyledFormMixin, forms.Form):
    user = forms.CharField(
        label=_("New owner (username or email)"),
        max_length=254,
        widget=forms.TextInput(attrs={"placeholder": _("Username or email of a member")}),
    )


class SecretForm(StyledFormMixin, forms.Form):
    """A new secret. The value field never renders what was typed back (not even after an error)."""

    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        help_text=_("As an environment variable: capital letters, digits and underscores, e.g. HF_TOKEN."),
    )
    value = forms.CharField(label=_("Value"), strip=False, widget=forms.PasswordInput(render_value=False))
    description = forms.CharField(label=_("Description"), max_length=200, required=False)


class SecretReplaceForm(StyledFormMixin, forms.Form):
    value = forms.CharField(label=_("New value"), strip=False, widget=forms.PasswordInput(render_value=False))
