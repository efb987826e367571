"""Following a registry alias: when it moves, the services that follow it roll out the version it points at now
(queued by apps/serving/signals.py after the commit that moved it)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.serving.models import InferenceService, Revision
from apps.serving.services.deploy import Role, deploy, lock_service, resolve_version
from apps.serving.services.rollout import advance, retire


def follow_alias(registered_model_id: int, alias: str) -> list[Revision]:
    """An alias moved (or appeared): every running service following it rolls out the version it points at now,
    unless that version already serves or is rolling out."""
    rolled = []
    followers = InferenceService.objects.filter(
        registered_model_id=registered_model_id, follow_alias=alias, model_version__isnull=True
    ).exclude(status=InferenceService.Status.STOPPED)
    for service in followers.select_related("project", "registered_model"):
        version = resolve_version(service)
        if version is None:
            continue
        rolling = list(service.revisions.filter(status=Revision.Status.ROLLING_OUT, role=Role.CURRENT))
        target = rolling[0] if rolling else service.current_revision  # newest first
        if target is not None and target.model_version_id == version.pk:
            continue  # already serving it, or on the way
        current = service.current_revision
        if rolling and current is not None and current.model_version_id == version.pk:
            with transaction.atomic():  # moved back to what serves: the rollout in progress is dropped
                lock_service(service)
                for revision in rolling:
                    why = _("alias “%(a)s” moved back to version %(v)d") % {"a": alias, "v": version.version}
                    retire(revision, why, drain=False)
            advance(service.pk, changed=True)
            continue
        try:
            revision = deploy(service, None, version=version)
        except ValidationError as exc:  # e.g. no agent now: the service says why; the next move tries again
            InferenceService.objects.filter(pk=service.pk).update(
                reason=_("Alias “%(alias)s” moved to version %(v)d, but it could not deploy: %(why)s")
                % {"alias": alias, "v": version.version, "why": " ".join(exc.messages)}
            )
            continue
        if revision is not None:
            rolled.append(revision)
    return rolled
