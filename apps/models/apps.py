from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ModelsConfig(AppConfig):
    name = "apps.models"
    label = "models"
    verbose_name = _("Experiments and models")

    def ready(self) -> None:
        # Imported here, not at the top: models and what uses them load only once the app registry is ready.
        from apps.models import artifacts, lookups  # noqa: F401 (lookups registers MLflow search's like/ilike)
        from apps.projects.storage import register_usage

        register_usage(artifacts.USAGE, artifacts.usage)  # artifacts count against the project's storage quota
        from apps.jobs.references import register_reference_choices
        from apps.jobs.runtime_hooks import on_image_digest
        from apps.models.registry import model_names
        from apps.models.services import tag_image_digest

        on_image_digest(tag_image_digest)  # a task's tracked runs are tagged with the image digest it ran
        register_reference_choices("model", model_names)  # the pipeline editor suggests registered models
        self._forget_callers_on_access_changes()

    @staticmethod
    def _forget_callers_on_access_changes() -> None:
        """The MLflow API's cached tokens and grants (access.TOKEN_CALLERS) are dropped when who may do what
        changes in this process; other processes catch up within PORTAL_MLFLOW_AUTH_TTL."""
        from django.contrib.auth import get_user_model
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from apps.accounts.models import ApiToken
        from apps.models.access import TOKEN_CALLERS
        from apps.projects.models import Membership, Project, ProjectGroupObjectPermission, ProjectUserObjectPermission

        user_model = get_user_model()
        models = (ApiToken, user_model, Membership, Project, ProjectUserObjectPermission, ProjectGroupObjectPermission)
        for model in models:
            for signal in (post_save, post_delete):
                signal.connect(TOKEN_CALLERS.forget_all, sender=model, dispatch_uid=f"mlflow-callers-{model.__name__}")
        m2m_changed.connect(
            TOKEN_CALLERS.forget_all, sender=user_model.groups.through, dispatch_uid="mlflow-callers-groups"
        )
