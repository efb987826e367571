"""What other apps may hear from monitoring (connected in their `AppConfig.ready()`; sent after the commit)."""

from django.dispatch import Signal

# A report crossed its monitor's threshold: kwargs monitor, report, score. Sent once per drifted report, after the
# transaction that wrote it committed (alerts and continuous training listen).
drift_detected = Signal()
