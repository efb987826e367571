"""The local autoscaler: every PORTAL_SERVING_AUTOSCALE_INTERVAL seconds, each serving revision's replica count is
set from its measured load, within the service's min and max replicas.

- concurrency (the default): desired = ceil(average requests in flight over the last PORTAL_SERVING_SCALE_WINDOW
  seconds / target per replica), as measured by the router (apps.serving.stats.concurrency, summed over the web
  processes). This is Knative's (and so KServe's) rule.
- cpu: desired = ceil(ready replicas × their average CPU utilisation / target %), the HorizontalPodAutoscaler's
  rule, from the agent's per-process samples (utilisation = CPU % of the replica's process tree ÷ its CPU request).

Up at once, as far as the project's quota leaves room (its tasks, notebooks and other model servers hold their
share); down only once the load has wanted fewer replicas for PORTAL_SERVING_SCALE_DOWN_DELAY seconds (without
that, a pause between bursts would stop replicas that the next burst needs and then waits for). Locally the floor
is one replica (no scale to zero). On Kubernetes the cluster scales (HPA or KServe): nothing here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.projects.usage import in_use
from apps.serving.hosting import hosting_of
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services.rollout import advance
from portal.lib.resources import Resources

logger = logging.getLogger(__name__)

Measure = Callable[[Revision], float | None]


def measured_concurrency(revision: Revision) -> float | None:
    try:
        from apps.serving.stats import concurrency
    except ImportError:  # the router's statistics are not installed: nothing measured
        return None
    return concurrency(revision.pk, float(settings.PORTAL_SERVING_SCALE_WINDOW))


def measured_cpu(revision: Revision) -> float | None:
    """Average utilisation (%) of the CPU request over the ready replicas' latest samples; None without samples."""
    samples = list(
        revision.replicas.filter(status=Replica.Status.READY, cpu_percent__isnull=False).values_list(
            "cpu_percent", flat=True
        )
    )
    if not samples:
        return None
    request = float((revision.config.get("resources") or {}).get("cpu") or 1) or 1.0
    return sum(samples) / len(samples) / request


def desired_for(service: InferenceService, revision: Revision, value: float | None) -> int:
    """The replica count the measured `value` asks for, within the service's bounds (the current count when
    nothing was measured)."""
    low, high = max(service.min_replicas, 1), max(service.max_replicas, 1)
    if value is None:
        wanted = revision.desired_replicas or low
    elif service.scale_metric == InferenceService.ScaleMetric.CPU:
        ready = revision.replicas.filter(status=Replica.Status.READY).count() or 1
        wanted = math.ceil(ready * value / service.scale_target - 1e-9)
    else:
        wanted = math.ceil(value / service.scale_target - 1e-9)
    return min(max(wanted, low), high)


def scale_revision(revision: Revision, value: float | None, now: datetime | None = None) -> int:
    """Apply one measurement to one revision: returns its desired replica count afterwards (replicas start or stop
    through the rollout state machine)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Revision.objects.select_for_update(of=("self",)).select_related("service__project__quota")
        revision = locked.get(pk=revision.pk)
        service = revision.service
        wanted = desired_for(service, revision, value)
        current = revision.desired_replicas or max(service.min_replicas, 1)
        low_since = revision.low_since
        if wanted > current:
            room = _quota_room(service, revision)
            if current + room < wanted:
                logger.warning(
                    "service %s r%s: wants %s replicas, the project's quota leaves room for %s more than %s",
                    service.pk, revision.number, wanted, room, current,
                )  # fmt: skip
            current, low_since = max(current, min(wanted, current + room)), None
        elif wanted < current:
            if low_since is None:
                low_since = now
            elif now - low_since >= timedelta(seconds=settings.PORTAL_SERVING_SCALE_DOWN_DELAY):
                current, low_since = wanted, None
        else:
            low_since = None
        changed = current != revision.desired_replicas
        if changed or low_since != revision.low_since:
            Revision.objects.filter(pk=revision.pk).update(desired_replicas=current, low_since=low_since)
    if changed:
        logger.info("service %s r%s: %s replicas (measured %s)", service.pk, revision.number, current, value)
        advance(service.pk, changed=True)
    return current


def _quota_room(service: InferenceService, revision: Revision) -> int:
    """How many more replicas of the revision the project's quota takes (its notebooks, tasks and model servers
    hold their share: apps/projects/usage.py)."""
    quota = getattr(service.project, "quota", None)
    if quota is None or not quota.limits_anything:
        return 1_000_000  # nothing limits
    return quota.room_for(Resources.from_json(revision.config.get("resources")), in_use(service.project))


def autoscale(now: datetime | None = None, measure: Measure | None = None) -> dict[int, int]:
    """One pass over the local revisions that serve: {revision id: desired replicas}."""
    revisions = (
        Revision.objects.filter(status=Revision.Status.READY)
        .exclude(service__status=InferenceService.Status.STOPPED)
        .select_related("service")
    )
    decided = {}
    for revision in revisions:
        if not hosting_of(revision).autoscaled_here:
            continue  # the cluster's autoscaler owns its pods
        service = revision.service
        if revision.pk not in (service.current_revision_id, service.canary_revision_id, service.shadow_revision_id):
            continue
        if measure is not None:
            value = measure(revision)
        elif service.scale_metric == InferenceService.ScaleMetric.CPU:
            value = measured_cpu(revision)
        else:
            value = measured_concurrency(revision)
        try:
            decided[revision.pk] = scale_revision(revision, value, now)
        except Exception:  # one revision's failure must not stop the others'
            logger.exception("autoscaling revision %s failed", revision.pk)
    return decided
