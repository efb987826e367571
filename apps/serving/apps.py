"""Inference services: registered models served over the Open Inference Protocol v2 behind the portal's router."""

from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "apps.serving"
    label = "serving"
    verbose_name = "Serving"
