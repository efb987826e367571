from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ModelsConfig(AppConfig):
    name = "apps.models"
    label = "models"
    verbose_name = _("Experiments and models")

    def ready(self) -> None:
        from apps.models import lookups  # noqa: F401 (registers the like/ilike lookups of MLflow's search)
