from django.apps import AppConfig
from django.conf import settings
from django.utils.translation import gettext_lazy as _


class DatasetsConfig(AppConfig):
    name = "apps.datasets"
    verbose_name = _("Datasets")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        # The hourly sweep of stale uploads and unused blobs joins beat's schedule here, beside the app it
        # belongs to (settings keep the portal-wide entries).
        schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None)
        if isinstance(schedule, dict):
            schedule.setdefault(
                "datasets-cleanup-uploads", {"task": "apps.datasets.tasks.cleanup_uploads", "schedule": 3600.0}
            )
        from apps.datasets import quota
        from apps.datasets.services import forget_project_datasets
        from apps.projects.services import on_project_delete
        from apps.projects.storage import register_usage

        on_project_delete(forget_project_datasets)
        from apps.datasets.services import sandbox_paths
        from apps.runtime import hooks

        hooks.register_readable_paths(sandbox_paths)  # a sandboxed task reads the dataset versions it names
        register_usage(quota.USAGE, quota.usage)
