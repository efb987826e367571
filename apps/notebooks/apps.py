"""Notebooks: a JupyterLab (or code-server) per user, supervised by the runtime, reached only through the
portal's proxy, stopped when idle."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NotebooksConfig(AppConfig):
    name = "apps.notebooks"
    label = "notebooks"
    verbose_name = _("Notebooks")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.notebooks.runtime_hooks import NotebookListener, describe_holders, quota_held
        from apps.projects.usage import register_holding
        from apps.runtime import hooks

        hooks.register("notebook", NotebookListener())
        hooks.register_describer("notebook", describe_holders)
        register_holding("notebook", quota_held)
        from apps.notebooks.services import delete_project_notebooks
        from apps.projects.services import on_project_delete

        on_project_delete(delete_project_notebooks)
