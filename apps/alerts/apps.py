"""Alerts: rules per project over runs, services, quotas and notebooks, sent to in-app notifications, email and
webhooks (docs/alerts.md)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AlertsConfig(AppConfig):
    name = "apps.alerts"
    label = "alerts"
    verbose_name = _("Alerts")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.alerts.services import on_notebook_culled, on_run_finished
        from apps.jobs.orchestrator import on_run_finished as jobs_on_run_finished
        from apps.notebooks.culler import on_culled

        jobs_on_run_finished(on_run_finished)  # run failed / succeeded rules hear of each ended run
        on_culled(on_notebook_culled)
