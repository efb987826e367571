from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ModelsConfig(AppConfig):
    name = "apps.models"
    label = "models"
    verbose_name = _("Experiments and models")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.models import artifacts, lookups  # noqa: F401 (lookups registers MLflow search's like/ilike)
        from apps.projects.storage import register_usage

        register_usage(artifacts.USAGE, artifacts.usage)  # artifacts count against the project's storage quota
        from apps.jobs.references import register_reference_choices
        from apps.jobs.runtime_hooks import on_image_digest
        from apps.models.registry import model_names
        from apps.models.services import tag_image_digest

        on_image_digest(tag_image_digest)  # a task's tracked runs are tagged with the image digest it ran
        register_reference_choices("model", model_names)  # the pipeline editor suggests registered models
