"""The services that serve a model version or follow a model's alias, for the registry's pages (`apps.models.uses`)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.models.models import ModelVersion, RegisteredModel
from apps.models.uses import Use
from apps.serving.models import InferenceService


def services_serving(version: ModelVersion) -> Iterator[Use]:
    """Each service whose current, canary or shadow revision serves `version`, with that role and its status."""
    services = (
        InferenceService.objects.filter(
            Q(current_revision__model_version=version)
            | Q(canary_revision__model_version=version)
            | Q(shadow_revision__model_version=version),
            project_id=version.registered_model.project_id,
        )
        .select_related("project", "current_revision", "canary_revision", "shadow_revision")
        .order_by("name")
    )
    for service in services:
        roles = []
        if service.current_revision and service.current_revision.model_version_id == version.pk:
            roles.append(_("current revision"))
        if service.canary_revision and service.canary_revision.model_version_id == version.pk:
            roles.append(_("canary, %(percent)s%% of traffic") % {"percent": service.canary_percent})
        if service.shadow_revision and service.shadow_revision.model_version_id == version.pk:
            roles.append(_("shadow, %(percent)s%% of traffic") % {"percent": service.shadow_percent})
        url = reverse("serving:service-detail", kwargs={"project": service.project.slug, "pk": service.pk})
        role = ", ".join(roles)
        yield Use(_("Service"), service.name, url, f"{role} · {service.get_status_display()}")


def services_following(model: RegisteredModel) -> Iterator[tuple[str, Use]]:
    """(alias, service) for each service that follows an alias of `model`."""
    services = (
        InferenceService.objects.filter(registered_model=model, model_version__isnull=True)
        .exclude(follow_alias="")
        .select_related("project")
        .order_by("name")
    )
    for service in services:
        url = reverse("serving:service-detail", kwargs={"project": service.project.slug, "pk": service.pk})
        yield service.follow_alias, Use(_("Service"), service.name, url, service.get_status_display())
