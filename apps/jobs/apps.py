from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    name = "apps.jobs"
    verbose_name = _("Jobs and pipelines")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.jobs import checks  # noqa: F401  (registers the queue settings' system checks)
        from apps.jobs.runtime_hooks import TaskListener, describe_holders, quota_held, registry_credentials
        from apps.projects.usage import register_holding
        from apps.runtime import hooks

        hooks.register("task_run", TaskListener())
        hooks.register_describer("task_run", describe_holders)
        from apps.jobs.usage import measure_holders

        hooks.register_measurer("task_run", measure_holders)
        hooks.register_registry_credentials("image", registry_credentials)
        register_holding("task", quota_held, queued=True)
        from apps.jobs.deletion import stop_project_runs
        from apps.projects.services import on_project_delete

        on_project_delete(stop_project_runs)
        post_migrate.connect(_load_builtins, sender=self)


def _load_builtins(sender: AppConfig, using: str = "default", **kwargs: object) -> None:
    """Built-in job templates arrive with `migrate` (idempotent: unchanged ones are left alone)."""
    if using != "default":
        return
    from apps.jobs.builtin import load_builtin_templates

    load_builtin_templates()
