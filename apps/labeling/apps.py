"""Labeling: projects annotated in a real Label Studio server, bound to the portal's projects, datasets and
people (docs/labeling.md)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LabelingConfig(AppConfig):
    name = "apps.labeling"
    label = "labeling"
    verbose_name = _("Labeling")
