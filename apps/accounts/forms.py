from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.translation import get_language_info
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import ApiToken
from apps.projects.models import Project
from portal.lib.forms import StyledFormMixin


def language_choices() -> list[tuple[str, str]]:
    """Each language in its own words ("English", "简体中文"), so that anyone finds theirs whatever the page's
    language; the empty choice follows the browser."""
    return [("", _("Same as the browser"))] + [
        (code, get_language_info(code)["name_local"]) for code, _name in settings.LANGUAGES
    ]


class ProfileForm(StyledFormMixin, forms.ModelForm):
    language = forms.ChoiceField(
        label=_("Language"),
        choices=language_choices,
        required=False,
        help_text=_("The language of the pages, messages and API errors, on every device you sign in from."),
    )

    class Meta:
        model = get_user_model()
        fields = ["first_name", "last_name", "email", "language"]

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        User = get_user_model()
        if email and User.objects.filter(email__iexact=email).exclude(pk=self.instance.pk).exists():
            raise forms.ValidationError(_("Another account uses this email."))
        return email


class TokenForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    project = forms.ModelChoiceField(
        label=_("Project"),
        queryset=Project.objects.none(),
        required=False,
        empty_label=_("All my projects"),
        to_field_name="slug",
    )
    scope = forms.ChoiceField(label=_("Scope"), choices=ApiToken.Scope.choices, initial=ApiToken.Scope.WRITE)
    days = forms.IntegerField(
        label=_("Expires after (days)"),
        required=False,
        min_value=1,
        max_value=settings.PORTAL_TOKEN_MAX_DAYS,
        help_text=_("Leave empty for a token that does not expire."),
    )

    def __init__(self, *args: object, projects=None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        if projects is not None:
            self.fields["project"].queryset = projects
