from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    verbose_name = _("Runtime")
