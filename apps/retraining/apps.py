"""Continuous training: data monitors and drift start retrain policies; a champion/challenger gate promotes, asks
for approval or rejects what they register (docs/retraining.md)."""

from django.apps import AppConfig
from django.conf import settings
from django.utils.translation import gettext_lazy as _


class RetrainingConfig(AppConfig):
    name = "apps.retraining"
    label = "retraining"
    verbose_name = _("Continuous training")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from django.db.models.signals import post_save

        from apps.datasets.models import DatasetVersion
        from apps.jobs.orchestrator import on_run_finished
        from apps.monitoring.signals import drift_detected
        from apps.retraining import hooks
        from apps.retraining.kinds import register_kind

        post_save.connect(hooks.version_saved, sender=DatasetVersion, dispatch_uid="retraining-new-version")
        drift_detected.connect(hooks.drift_reported, dispatch_uid="retraining-drift")
        on_run_finished(hooks.run_finished)
        register_kind()
        schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None)
        if isinstance(schedule, dict):
            schedule.setdefault(
                "retraining-interval-monitors", {"task": "apps.retraining.tasks.check_due_monitors", "schedule": 60.0}
            )
