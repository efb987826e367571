from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    name = "apps.jobs"
    verbose_name = _("Jobs and pipelines")

    def ready(self) -> None:
        from apps.jobs.runtime_hooks import TaskListener
        from apps.runtime import hooks

        hooks.register("task_run", TaskListener())
