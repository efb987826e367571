from __future__ import annotations

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


class ProjectSettingsForm(StyledFormMixin, forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 4})}

    def validate_unique(self) -> None:
        """Uniqueness is checked by the service, with the same message as the API."""


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
    user = forms.CharField(label=_("Username or email"), max_length=254)

    field_order = ["user", "role"]


class TransferForm(StyledFormMixin, forms.Form):
    user = forms.CharField(label=_("New owner (username or email)"), max_length=254)
