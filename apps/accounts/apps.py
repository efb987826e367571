from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    verbose_name = _("Accounts")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.accounts import oidc, schema  # noqa: F401 - register the OIDC system checks, the OpenAPI auth extension
        from apps.accounts.services import notify
        from apps.projects.services import on_member_notice

        on_member_notice(notify)  # "alice added you to project A" reaches the navbar
