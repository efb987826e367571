from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ConsoleConfig(AppConfig):
    """The top app: pages and commands that gather every other app (home, a project's overview, `manage.py demo`).
    It has no models; nothing imports it (docs/architecture.md, "Layers")."""

    name = "apps.console"
    verbose_name = _("Console")
