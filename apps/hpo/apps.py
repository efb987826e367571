"""Hyperparameter studies (Katib/NNI-style) on Optuna: each trial is an ordinary pipeline run."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class HpoConfig(AppConfig):
    name = "apps.hpo"
    label = "hpo"
    verbose_name = _("Hyperparameter studies")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.hpo.services import delete_project_studies, kick_for_run
        from apps.jobs.orchestrator import on_run_finished
        from apps.projects.services import on_project_delete

        on_project_delete(delete_project_studies)
        on_run_finished(kick_for_run)  # a trial's run ended: its study's slot is free now, not at the next beat
