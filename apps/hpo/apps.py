"""Hyperparameter studies (Katib/NNI-style) on Optuna: each trial is an ordinary pipeline run."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class HpoConfig(AppConfig):
    name = "apps.hpo"
    label = "hpo"
    verbose_name = _("Hyperparameter studies")
