"""The app store: a catalogue of versioned app bundles that install working pipelines, services, datasets and
notebooks into a project (docs/appstore.md)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AppstoreConfig(AppConfig):
    name = "apps.appstore"
    label = "appstore"
    verbose_name = _("App store")

    def ready(self) -> None:
        # Imported here: the installers use the models of the apps below, loaded once the registry is ready.
        from apps.appstore import installers

        installers.register_builtin_installers()
