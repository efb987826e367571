"""Monitoring of served models: drift of their inputs against the data they were trained on (docs/monitoring.md)."""

from django.apps import AppConfig
from django.conf import settings
from django.utils.translation import gettext_lazy as _


class MonitoringConfig(AppConfig):
    name = "apps.monitoring"
    label = "monitoring"
    verbose_name = _("Monitoring")

    def ready(self) -> None:
        # The sweep that runs due drift monitors joins beat's schedule here, beside the app it belongs to.
        schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None)
        if isinstance(schedule, dict):
            schedule.setdefault(
                "monitoring-check-drift", {"task": "apps.monitoring.tasks.check_monitors", "schedule": 60.0}
            )
