"""The audit log: one entry per successful mutating request (see apps/audit/capture.py)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"
    verbose_name = _("Audit log")

    def ready(self) -> None:
        # Signals are how the log sees every app's writes without those apps knowing about it.
        from apps.audit import capture

        capture.connect()
