"""Inference services: registered models served over the Open Inference Protocol v2 behind the portal's router."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ServingConfig(AppConfig):
    name = "apps.serving"
    label = "serving"
    verbose_name = _("Serving")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.projects.usage import register_holding
        from apps.runtime import hooks
        from apps.serving import signals
        from apps.serving.replicas import LABEL
        from apps.serving.runtime_hooks import ReplicaListener, describe_holders, quota_held, sandbox_paths

        hooks.register(LABEL, ReplicaListener())
        hooks.register_describer(LABEL, describe_holders)
        register_holding("replica", quota_held)
        hooks.register_readable_paths(sandbox_paths)  # a model server reads its model
        from apps.projects.services import on_project_delete
        from apps.serving.services import delete_project_services

        on_project_delete(delete_project_services)
        signals.connect()
        from apps.models import uses
        from apps.serving.uses import services_following, services_serving

        uses.register(services_serving)
        uses.register_alias_finder(services_following)
