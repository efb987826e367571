"""Labeling: projects annotated in a real Label Studio server, bound to the portal's projects, datasets and
people (docs/labeling.md)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LabelingConfig(AppConfig):
    name = "apps.labeling"
    label = "labeling"
    verbose_name = _("Labeling")

    def ready(self) -> None:
        from apps.jobs.models import RUN_TRIGGERS

        # How a run started by "train on these labels" or START_TRAINING is named on the run pages.
        RUN_TRIGGERS.setdefault("labeling", _("Trained on labels"))
