"""Notebooks: a JupyterLab (or code-server) per user, supervised by the runtime, reached only through the
portal's proxy, stopped when idle."""

from django.apps import AppConfig


class NotebooksConfig(AppConfig):
    name = "apps.notebooks"
    label = "notebooks"
    verbose_name = "Notebooks"
