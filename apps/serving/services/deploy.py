"""Deploying: a new revision with a frozen config, rolled out next to what serves (which goes on serving until the new
replicas are ready: apps/serving/services/rollout.py); rollback, canary and shadow revisions; stop, start, delete;
the service key.

Rollback makes a *new* revision with the config and model version of the chosen one (history stays a straight
line of immutable records, and the old revision's replicas are long gone anyway); it rolls out like any deploy.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.models.models import ModelAlias, ModelVersion
from apps.runtime.placement import pools_for
from apps.serving.hosting import hosting_for, start_replicas
from apps.serving.models import Framework, InferenceService, Revision
from apps.serving.replicas import model_format
from apps.serving.services.rollout import advance, retire
from portal.lib.resources import Resources

logger = logging.getLogger(__name__)

Role = Revision.Role
ACTIVE = (Revision.Status.ROLLING_OUT, Revision.Status.READY)
# What a revision carries over from the service's settings (and a rollback from the revision it repeats).
CARRIED = (
    "framework",
    "image",
    "command",
    "env",
    "resources",
    "min_replicas",
    "max_replicas",
    "scale_metric",
    "scale_target",
    "model_name",
)


def lock_service(service: InferenceService) -> InferenceService:
    return (
        InferenceService.objects.select_for_update(of=("self",))
        .select_related("project", "project__quota")
        .get(pk=service.pk)
    )


def resolve_version(service: InferenceService) -> ModelVersion | None:
    """The version the service serves now: its pinned one, or the one its alias points at (None: not yet)."""
    if service.model_version_id:
        return service.model_version
    if service.follow_alias and service.registered_model_id:
        row = ModelAlias.objects.filter(registered_model_id=service.registered_model_id, alias=service.follow_alias)
        found = row.select_related("model_version").first()
        return found.model_version if found is not None else None
    return None


def waiting_reason(service: InferenceService) -> str:
    return _("Waiting for a version at alias “%(alias)s” of %(model)s; it deploys when the alias is set.") % {
        "alias": service.follow_alias, "model": service.registered_model.name if service.registered_model else "?",
    }  # fmt: skip


def service_settings(service: InferenceService) -> dict[str, Any]:
    return {
        "framework": service.framework, "image": service.image, "command": list(service.command),
        "env": dict(service.env), "model_name": service.name,
        "resources": Resources.of(service.cpu, service.memory_bytes, service.gpu).amounts_json(),
        "min_replicas": service.min_replicas, "max_replicas": service.max_replicas,
        "scale_metric": service.scale_metric, "scale_target": service.scale_target,
    }  # fmt: skip


def placement(service: InferenceService) -> dict[str, Any]:
    """Where the revision runs: the project's runtime and, on Kubernetes, its first bound cluster and how a
    revision is served there ("kserve" when the cluster has KServe, else a Deployment). ValidationError when
    nothing can run it now."""
    pools = pools_for(service.project)
    if not pools:
        raise ValidationError(_("The project runs on Kubernetes and no enabled cluster is bound to it."))
    pool = pools[0]
    return hosting_for(pool.runtime).placement(service, pool.runtime, pool.cluster, pool.namespace)


def freeze_config(
    service: InferenceService, number: int, version: ModelVersion | None, carried: dict[str, Any], where: dict[str, Any]
) -> dict[str, Any]:
    """Everything the replicas of revision `number` run with; never changed afterwards."""
    hosting = hosting_for(where["runtime"])
    config: dict[str, Any] = {**carried, **where}
    config["model_path"] = ""
    if version is not None:
        rm = version.registered_model
        config.update(
            registered_model=rm.name, model_version=version.version, source=version.source, alias=service.follow_alias
        )
        config["model_path"] = hosting.model_path(service, number, version.source)
        if carried.get("framework") not in (Framework.CUSTOM, Framework.LLM):
            config["model_format"] = model_format(version.source)  # which environment the replicas need
    hosting.complete_config(config, version is not None)
    return config


def _next_number(service: InferenceService) -> int:
    return (service.revisions.aggregate(m=Max("number"))["m"] or 0) + 1


def deploy(
    service: InferenceService,
    user: Any,
    *,
    role: str = Role.CURRENT,
    percent: int = 0,
    version: ModelVersion | None = None,
    template: Revision | None = None,
) -> Revision | None:
    """Roll out a new revision of what the service's settings say (or, with `template`, of that revision's config
    and version: a rollback), as the current revision, a canary taking `percent` of the traffic, or a shadow
    receiving `percent` of the requests as copies. What serves keeps serving until its replicas are all ready.
    Returns the revision, or None when the service follows an alias that points nowhere yet (it then waits)."""
    if role not in Role.values:
        raise ValidationError({"role": [_("Choose current, canary or shadow.")]})
    with transaction.atomic():
        service = lock_service(service)
        if role != Role.CURRENT and service.current_revision_id is None:
            raise ValidationError(_("Deploy a current revision before a canary or a shadow."))
        if template is not None:
            version, carried = template.model_version, {k: template.config[k] for k in CARRIED if k in template.config}
        else:
            version = version or resolve_version(service)
            carried = service_settings(service)
            if version is None and service.framework != Framework.CUSTOM and service.registered_model_id:
                service.reason = waiting_reason(service)
                if service.current_revision_id is None and service.status != InferenceService.Status.STOPPED:
                    service.status = InferenceService.Status.PENDING
                service.save(update_fields=["reason", "status"])
                return None
        if version is not None and version.status != ModelVersion.Status.READY:
            raise ValidationError(_("Version %(v)s is not ready.") % {"v": version.version})
        where = placement(service)
        number = _next_number(service)
        config = freeze_config(service, number, version, carried, where)
        if template is not None:
            config["rollback_of"] = template.number
        revision = Revision.objects.create(
            service=service,
            number=number,
            model_version=version,
            config=config,
            role=role,
            traffic_percent=percent if role != Role.CURRENT else 0,
            status=Revision.Status.ROLLING_OUT,
            desired_replicas=max(service.min_replicas, 1),
            created_by=user if getattr(user, "pk", None) else None,
        )
        revision.service = service
        superseded = service.revisions.filter(status=Revision.Status.ROLLING_OUT, role=role).exclude(pk=revision.pk)
        for other in superseded:
            retire(other, _("superseded by r%(n)d") % {"n": number}, drain=False)
        if service.status == InferenceService.Status.STOPPED:
            service.status = InferenceService.Status.DEPLOYING
        service.reason, service.runtime = "", where["runtime"]
        service.updated_at = timezone.now()
        service.save(update_fields=["status", "reason", "runtime", "updated_at"])
        start_replicas(revision, revision.desired_replicas)
    advance(service.pk, changed=True)
    revision.refresh_from_db()
    return revision


def rollback(service: InferenceService, user: Any, number: Any) -> Revision:
    """Serve revision `number`'s model version with its config again, as a new revision (rolled out as any)."""
    try:
        number = int(str(number))
    except (TypeError, ValueError):
        raise ValidationError({"revision": [_("Give a revision number.")]}) from None
    template = service.revisions.filter(number=number).select_related("model_version").first()
    if template is None:
        raise ValidationError({"revision": [_("This service has no revision %(n)d.") % {"n": number}]})
    if template.pk == service.current_revision_id:
        raise ValidationError({"revision": [_("Revision %(n)d is the one serving.") % {"n": number}]})
    if not template.config.get("framework"):
        raise ValidationError({"revision": [_("Revision %(n)d has no config to repeat.") % {"n": number}]})
    revision = deploy(service, user, template=template)
    assert revision is not None  # a template always names what to serve
    return revision


def _percent(value: Any) -> int:
    try:
        percent = int(str(value).strip())
    except (TypeError, ValueError):
        raise ValidationError({"percent": [_("Give a whole number from 0 to 100.")]}) from None
    if not 0 <= percent <= 100:
        raise ValidationError({"percent": [_("Give a whole number from 0 to 100.")]})
    return percent


def _version_of(service: InferenceService, value: Any) -> ModelVersion | None:
    """A version of the service's registered model by number (None: what the settings say)."""
    if value in (None, ""):
        return None
    try:
        number = int(str(value))
    except ValueError:
        raise ValidationError({"model_version": [_("Give a version number.")]}) from None
    found = ModelVersion.objects.filter(registered_model_id=service.registered_model_id, version=number).first()
    if found is None:
        raise ValidationError({"model_version": [_("The registered model has no version %(v)d.") % {"v": number}]})
    return found


def deploy_canary(service: InferenceService, user: Any, percent: Any, model_version: Any = None) -> Revision:
    """A canary revision taking `percent` % of the requests once its replicas are ready."""
    revision = deploy(
        service, user, role=Role.CANARY, percent=_percent(percent), version=_version_of(service, model_version)
    )
    if revision is None:
        raise ValidationError(waiting_reason(service))
    return revision


def deploy_shadow(service: InferenceService, user: Any, percent: Any, model_version: Any = None) -> Revision:
    """A shadow revision receiving copies of `percent` % of the requests (its answers are dropped)."""
    revision = deploy(
        service, user, role=Role.SHADOW, percent=_percent(percent), version=_version_of(service, model_version)
    )
    if revision is None:
        raise ValidationError(waiting_reason(service))
    return revision


def set_traffic(service: InferenceService, role: str, percent: Any) -> InferenceService:
    """Move the canary's (or the shadow's) share; applies to one still rolling out too, once it is ready."""
    percent = _percent(percent)
    field = {Role.CANARY: "canary", Role.SHADOW: "shadow"}.get(role)
    if field is None:
        raise ValidationError({"role": [_("Choose canary or shadow.")]})
    with transaction.atomic():
        service = lock_service(service)
        rolling = service.revisions.filter(status=Revision.Status.ROLLING_OUT, role=role)
        if getattr(service, f"{field}_revision_id") is None and not rolling.exists():
            raise ValidationError(_("There is no %(role)s revision.") % {"role": Role(role).label.lower()})
        rolling.update(traffic_percent=percent)
        if getattr(service, f"{field}_revision_id") is not None:
            Revision.objects.filter(pk=getattr(service, f"{field}_revision_id")).update(traffic_percent=percent)
            setattr(service, f"{field}_percent", percent)
            service.save(update_fields=[f"{field}_percent"])
    advance(service.pk, changed=True)
    service.refresh_from_db()
    return service


def promote_canary(service: InferenceService) -> InferenceService:
    """The ready canary becomes the current revision (all traffic); the previous one drains and stops."""
    with transaction.atomic():
        service = lock_service(service)
        canary = service.canary_revision
        if canary is None:
            raise ValidationError(_("There is no ready canary to promote."))
        old = service.current_revision
        Revision.objects.filter(pk=canary.pk).update(role=Role.CURRENT, traffic_percent=0)
        service.current_revision, service.canary_revision, service.canary_percent = canary, None, 0
        service.reason = ""
        service.save()
        if old is not None:
            retire(old, _("replaced by canary r%(n)d") % {"n": canary.number})
    return advance(service.pk, changed=True) or service


def withdraw(service: InferenceService, role: str) -> InferenceService:
    """Abort the canary (or stop the shadow): its revision, ready or rolling out, leaves; all traffic is current's."""
    field = {Role.CANARY: "canary", Role.SHADOW: "shadow"}.get(role)
    if field is None:
        raise ValidationError({"role": [_("Choose canary or shadow.")]})
    with transaction.atomic():
        service = lock_service(service)
        revisions = list(service.revisions.filter(status=Revision.Status.ROLLING_OUT, role=role))
        serving = getattr(service, f"{field}_revision")
        if serving is not None:
            revisions.append(serving)
        if not revisions:
            raise ValidationError(_("There is no %(role)s revision.") % {"role": Role(role).label.lower()})
        setattr(service, f"{field}_revision", None)
        setattr(service, f"{field}_percent", 0)
        service.save(update_fields=[f"{field}_revision", f"{field}_percent"])
        for revision in revisions:
            retire(revision, _("%(role)s withdrawn") % {"role": Role(role).label})
    return advance(service.pk, changed=True) or service


def scale(service: InferenceService, *, min_replicas: Any, max_replicas: Any) -> InferenceService:
    """New scaling bounds, applied at once to every serving revision (no new revision)."""
    from apps.serving.services.config import clean_settings, current_settings

    values = {**current_settings(service), "min_replicas": min_replicas, "max_replicas": max_replicas}
    fields = clean_settings(service.project, values, allow_waiting=True)
    with transaction.atomic():
        service = lock_service(service)
        service.min_replicas, service.max_replicas = fields["min_replicas"], fields["max_replicas"]
        service.save(update_fields=["min_replicas", "max_replicas"])
        for revision in service.revisions.filter(status__in=ACTIVE):
            desired = min(max(revision.desired_replicas, service.min_replicas, 1), service.max_replicas)
            Revision.objects.filter(pk=revision.pk).update(desired_replicas=desired, low_since=None)
    return advance(service.pk, changed=True) or service
