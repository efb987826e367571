from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ModelsConfig(AppConfig):
    name = "apps.models"
    label = "models"
    verbose_name = _("Experiments and models")

    def ready(self) -> None:
        from apps.models import artifacts, lookups  # noqa: F401 (lookups registers MLflow search's like/ilike)
        from apps.projects.storage import register_usage

        register_usage(artifacts.USAGE, artifacts.usage)  # artifacts count against the project's storage quota
