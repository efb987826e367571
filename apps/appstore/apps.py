"""The app store: a catalogue of versioned app bundles that install working pipelines, services, datasets and
notebooks into a project (docs/appstore.md)."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class AppstoreConfig(AppConfig):
    name = "apps.appstore"
    label = "appstore"
    verbose_name = _("App store")

    def ready(self) -> None:
        # Imported here: the installers use the models of the apps below, loaded once the registry is ready.
        from apps.appstore import installers

        installers.register_builtin_installers()
        post_migrate.connect(_sync_builtin_apps, sender=self)


def _sync_builtin_apps(sender: AppConfig, using: str = "default", **kwargs: object) -> None:
    """The built-in catalogue arrives with `migrate`, after the built-in job templates its pipelines use (jobs is
    migrated first). Idempotent: an unchanged bundle adds nothing."""
    if using != "default":
        return
    from apps.appstore.services import sync_builtin_apps

    sync_builtin_apps()
