"""The rollout state machine, level-triggered: `advance(service)` looks at the service's revisions and replicas as
they are and does what is due — finish a rollout whose replicas are all ready (the traffic pointer moves, then the
replaced revision's replicas drain and stop), roll back one whose replicas failed or did not get ready in time,
keep a serving revision's replica count at what the autoscaler wants (replacing replicas that died), and say how
the service is. Every event (a replica ready or ended, a deploy, a scale decision) and the periodic reconcile call
it; calling it twice changes nothing more. It runs under a lock of the service's row, so the agent's listener, the
workers and the pages never interleave on one service.

A replica lost with its agent (the agent was killed or shut down under it) is an infrastructure event, not a
verdict on the model: it is recorded LOST, and a rollout starts it again, with backoff, up to
PORTAL_SERVING_LOST_RETRIES times, its readiness deadline counted from the retry; a serving revision replaces it
without counting it towards a crash loop. FAILED stays for replicas that end on their own (a crash, a model that
cannot load, a readiness timeout), and fails the rollout with their own reason.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.runtime.base import get_runtime
from apps.runtime.workload import AGENT_SHUT_DOWN, Phase, Status
from apps.serving.hosting import hosting_for, hosting_of, start_replicas
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.replicas import LIVE, cancel_due, meaningful_line, probe_ready, stop_replicas
from apps.serving.services.events import publish_service, state_of

logger = logging.getLogger(__name__)

ServiceStatus = InferenceService.Status
CRASH_WINDOW = timedelta(minutes=10)


# --- Reading what happened ----------------------------------------------------------------------------------------


def describe_end(status: Status | None, log_tail: str) -> str:
    """Why a replica ended: the runtime's reason (e.g. "exited with code 3") and its last telling log line."""
    what = (status.reason if status is not None else "") or (status.phase.value if status is not None else "ended")
    if status is not None and status.exit_code not in (None, 0) and str(status.exit_code) not in what:
        what = f"{what} (exit code {status.exit_code})"
    line = meaningful_line(log_tail)
    return f"{what}: {line}" if line else what


# --- Events -------------------------------------------------------------------------------------------------------


def record_end(replica_id: int, handle: str, status: Status | None, *, then_advance: bool = True) -> bool:
    """The workload `handle` of replica `replica_id` ended: STOPPED when it was asked to (or someone cancelled it),
    LOST when its agent died or shut down under it, else FAILED with the reason. A late event of an earlier workload
    never touches a replica that moved on. `then_advance`: the service's state machine runs next (callers in the
    middle of a change of their own pass False)."""
    replica = Replica.objects.filter(pk=replica_id, handle=handle).select_related("revision").first()
    if replica is None or replica.status in (Replica.Status.STOPPED, Replica.Status.FAILED, Replica.Status.LOST):
        return False
    lost = status is not None and lost_with_agent(status)
    if replica.status == Replica.Status.STOPPING or (
        status is not None and status.phase == Phase.CANCELLED and not lost
    ):
        new, reason = Replica.Status.STOPPED, replica.reason
    elif lost:
        new, reason = Replica.Status.LOST, _("lost with its agent: %(why)s") % {"why": status.reason or status.phase}
    else:
        new, reason = Replica.Status.FAILED, describe_end(status, replica.log_tail)
    changed = Replica.objects.filter(pk=replica.pk, status=replica.status).update(
        status=new, reason=reason[:2000], stopped_at=timezone.now()
    )
    if changed and then_advance:
        advance(replica.revision.service_id, changed=True)
    return bool(changed)


def lost_with_agent(status: Status) -> bool:
    """The workload ended because its agent died (LOST) or stopped (cancelled by the agent's own shutdown), not
    because of what it ran nor because anyone asked."""
    return status.phase == Phase.LOST or (status.phase == Phase.CANCELLED and status.reason == AGENT_SHUT_DOWN)


def mark_ready(replica_id: int) -> bool:
    """A starting replica answered its readiness probe: it takes traffic (and may finish its revision's rollout)."""
    replica = Replica.objects.filter(pk=replica_id).select_related("revision").first()
    if replica is None:
        return False
    changed = Replica.objects.filter(pk=replica_id, status=Replica.Status.STARTING).update(
        status=Replica.Status.READY, ready_at=timezone.now()
    )
    if changed:
        advance(replica.revision.service_id, changed=True)
    return bool(changed)


def check_starting(replicas: Iterable[Replica] | None = None) -> int:
    """Probe starting local replicas that said where they listen; mark the ready ones. Returns how many."""
    if replicas is None:
        replicas = (
            Replica.objects.filter(status=Replica.Status.STARTING).exclude(upstream="").select_related("revision")
        )
    ready = 0
    for replica in replicas:
        if not hosting_of(replica.revision).probes_readiness:
            continue  # the cluster's readiness probe decides; the runtime reports it running
        if probe_ready(replica.upstream) and mark_ready(replica.pk):
            ready += 1
    return ready


# --- The state machine --------------------------------------------------------------------------------------------


def advance(service_id: int, *, changed: bool = False) -> InferenceService | None:
    """Do what is due for one service (see the module's docstring). Idempotent. The service's pages are told
    when this pass changed what they show, or when the caller says it changed something already (`changed`)."""
    with transaction.atomic():
        service = (
            InferenceService.objects.select_for_update(of=("self",))
            .select_related("project")
            .filter(pk=service_id)
            .first()
        )
        if service is None:
            return None
        before = None if changed else state_of(service)
        revisions = list(service.revisions.filter(status__in=[Revision.Status.ROLLING_OUT, Revision.Status.READY]))
        for revision in revisions:
            revision.refresh_from_db(fields=["status", "role", "desired_replicas", "traffic_percent"])
            if revision.status not in (Revision.Status.ROLLING_OUT, Revision.Status.READY):
                continue  # retired or failed by an earlier step of this pass
            revision.service = service
            if revision.status == Revision.Status.ROLLING_OUT:
                _advance_rollout(service, revision)
            else:
                _keep_serving(service, revision)
        _refresh_status(service)
        if changed or state_of(service) != before:
            transaction.on_commit(functools.partial(publish_service, service))
    return service


def wanted_replicas(revision: Revision) -> int:
    return hosting_of(revision).wanted_replicas(revision)


def _advance_rollout(service: InferenceService, revision: Revision) -> None:
    replicas = list(revision.replicas.all())
    failed = next((r for r in replicas if r.status == Replica.Status.FAILED), None)
    if failed is not None:
        fail_rollout(service, revision, failed.reason or _("a replica failed"))
        return
    wanted = wanted_replicas(revision)
    ready = sum(r.status == Replica.Status.READY for r in replicas)
    live = sum(r.status in LIVE for r in replicas)
    if ready >= wanted:
        complete_rollout(service, revision)
        return
    if live < wanted:
        if _retry_lost(service, revision, replicas, wanted):
            start_replicas(revision, wanted - live)
        return  # replicas just started (or waiting to be retried): the deadline counts from their start
    waited = (timezone.now() - attempt_started(revision, replicas)).total_seconds()
    if waited > settings.PORTAL_SERVING_READY_TIMEOUT:
        if _record_unreported_ends(replicas):  # a dead agent's replicas: lost, not late
            _advance_rollout(service, revision)
            return
        if not hosting_of(revision).any_process_started(replicas):
            _say(service, revision, _waiting_for_agent(revision))  # infrastructure, not the model: wait
            return
        fail_rollout(service, revision, _timeout_reason(revision, replicas))


def attempt_started(revision: Revision, replicas: list[Replica]) -> datetime:
    """When the rollout's current attempt began: the deploy, or the latest start of a replica (a retry after a
    loss gets the whole readiness timeout again)."""
    return max([revision.created_at, *(r.started_at for r in replicas)])


def lost_backoff(retry: int) -> float:
    """Seconds between a loss and the `retry`-th start after it: doubling, at most 5 minutes."""
    return min(settings.PORTAL_SERVING_LOST_BACKOFF * 2 ** max(retry - 1, 0), 300)


def _retry_lost(service: InferenceService, revision: Revision, replicas: list[Replica], wanted: int) -> bool:
    """Whether replicas may start now: yes unless some were lost with their agent and the backoff since the last
    loss has not passed (the service says when the retry comes), or the retries are used up (the rollout fails)."""
    lost = [r for r in replicas if r.status == Replica.Status.LOST]
    if not lost:
        return True
    retry = -(-len(lost) // wanted)  # a loss takes the attempt's replicas with it: one retry per `wanted` lost
    last = max(lost, key=lambda r: r.stopped_at or r.started_at)
    if retry > settings.PORTAL_SERVING_LOST_RETRIES:
        fail_rollout(
            service,
            revision,
            _("its replicas were lost with their agent %(n)d times; not retried again (last: %(why)s)")
            % {"n": retry, "why": last.reason},
        )
        return False
    due = (last.stopped_at or last.started_at) + timedelta(seconds=lost_backoff(retry))
    if timezone.now() < due:
        message = _("r%(n)d: %(why)s; retry %(i)d of %(max)d at %(at)s") % {
            "n": revision.number, "why": last.reason, "i": retry, "max": settings.PORTAL_SERVING_LOST_RETRIES,
            "at": timezone.localtime(due).strftime("%H:%M:%S"),
        }  # fmt: skip
        _say(service, revision, message)
        return False
    _say(service, revision, _("r%(n)d: retry %(i)d of %(max)d after %(why)s") % {
        "n": revision.number, "i": retry, "max": settings.PORTAL_SERVING_LOST_RETRIES, "why": last.reason,
    })  # fmt: skip
    return True


def _say(service: InferenceService, revision: Revision, message: str) -> None:
    """Why a rollout waits: on the revision, and on the service for its current revision (cleared once it serves)."""
    message = message[:2000]
    if revision.reason != message:
        revision.reason = message
        revision.save(update_fields=["reason"])
    if revision.role == Revision.Role.CURRENT and service.reason != message:
        service.reason = message
        service.save(update_fields=["reason"])


def _record_unreported_ends(replicas: list[Replica]) -> bool:
    """Ask the runtime about live replicas before a timeout blames them: ends nobody reported (an agent that died
    with them) are recorded first. Returns whether any was."""
    live = [r for r in replicas if r.status in LIVE and r.handle]
    if not live:
        return False
    runtime = get_runtime(live[0].revision.config.get("runtime") or "local")
    statuses = runtime.poll_many([r.handle for r in live])
    ended = False
    for replica in live:
        status = statuses.get(replica.handle)
        if status is not None and status.phase.finished:
            ended |= record_end(replica.pk, replica.handle, status, then_advance=False)
    return ended


def _waiting_for_agent(revision: Revision) -> str:
    return _(
        "r%(n)d: waiting for an agent to start its replicas (none has for %(s)d s; is an agent running? "
        "`manage.py runagent`)"
    ) % {"n": revision.number, "s": settings.PORTAL_SERVING_READY_TIMEOUT}


def _timeout_reason(revision: Revision, replicas: list[Replica]) -> str:
    ready = sum(r.status == Replica.Status.READY for r in replicas)
    reason = _("%(ready)d of %(wanted)d replicas ready after %(s)d s") % {
        "ready": ready, "wanted": wanted_replicas(revision), "s": settings.PORTAL_SERVING_READY_TIMEOUT,
    }  # fmt: skip
    waiting = [r for r in replicas if r.status == Replica.Status.STARTING]
    return reason + hosting_of(revision).timeout_detail(waiting) if waiting else reason


def complete_rollout(service: InferenceService, revision: Revision) -> None:
    """The revision's replicas are ready: it takes its place, and what it replaces drains and stops."""
    now = timezone.now()
    revision.status, revision.ready_at, revision.reason = Revision.Status.READY, now, ""
    revision.save(update_fields=["status", "ready_at", "reason"])
    role = revision.role
    if role == Revision.Role.CURRENT:
        old = service.current_revision
        service.current_revision = revision
        service.reason = ""
        if old is not None and old.pk != revision.pk:
            retire(old, _("replaced by r%(n)d") % {"n": revision.number})
    elif role == Revision.Role.CANARY:
        old = service.canary_revision
        service.canary_revision, service.canary_percent = revision, revision.traffic_percent
        if old is not None and old.pk != revision.pk:
            retire(old, _("replaced by canary r%(n)d") % {"n": revision.number})
    else:
        old = service.shadow_revision
        service.shadow_revision, service.shadow_percent = revision, revision.traffic_percent
        if old is not None and old.pk != revision.pk:
            retire(old, _("replaced by shadow r%(n)d") % {"n": revision.number})
    service.updated_at = now
    service.save()


def fail_rollout(service: InferenceService, revision: Revision, reason: str) -> None:
    """Roll back: the revision's replicas stop, whatever served before goes on serving, and both say why."""
    revision.status, revision.reason, revision.retired_at = Revision.Status.FAILED, reason[:2000], timezone.now()
    revision.save(update_fields=["status", "reason", "retired_at"])
    stop_replicas(list(revision.replicas.filter(status__in=LIVE)), _("rollout failed"), drain=False)
    values = {"n": revision.number, "reason": reason}
    if revision.role == Revision.Role.CURRENT and service.current_revision_id:
        values["cur"] = service.current_revision.number
        service.reason = _("Rollout of r%(n)d failed and was rolled back; r%(cur)d keeps serving. %(reason)s") % values
    elif revision.role == Revision.Role.CURRENT:
        service.reason = _("Rollout of r%(n)d failed: %(reason)s") % values
    elif revision.role == Revision.Role.CANARY:
        service.reason = _("Canary r%(n)d failed and was withdrawn: %(reason)s") % values
    else:
        service.reason = _("Shadow r%(n)d failed and was withdrawn: %(reason)s") % values
    service.reason = service.reason[:2000]
    service.updated_at = timezone.now()
    service.save(update_fields=["reason", "updated_at"])
    logger.info("service %s: %s", service.pk, service.reason)


def retire(revision: Revision, reason: str, *, drain: bool = True) -> None:
    """A revision leaves service: its replicas drain and stop."""
    Revision.objects.filter(pk=revision.pk).exclude(
        status__in=[Revision.Status.FAILED, Revision.Status.RETIRED]
    ).update(status=Revision.Status.RETIRED, retired_at=timezone.now(), reason=reason[:2000])
    stop_replicas(list(revision.replicas.filter(status__in=LIVE)), reason, drain=drain)


def _crash_looping(revision: Revision) -> bool:
    since = timezone.now() - CRASH_WINDOW
    died = revision.replicas.filter(status=Replica.Status.FAILED, stopped_at__gte=since).count()
    return died >= settings.PORTAL_SERVING_MAX_RESTARTS


def _keep_serving(service: InferenceService, revision: Revision) -> None:
    """A serving revision: as many replicas as wanted (dead ones replaced, extras stopped)."""
    roles = {service.current_revision_id, service.canary_revision_id, service.shadow_revision_id}
    if revision.pk not in roles:
        retire(revision, _("no longer serving"))
        return
    if service.status == ServiceStatus.STOPPED:
        return
    live = list(revision.replicas.filter(status__in=LIVE).order_by("index"))
    wanted = wanted_replicas(revision)
    if len(live) < wanted:
        if _crash_looping(revision):
            last = revision.replicas.filter(status=Replica.Status.FAILED).order_by("-stopped_at").first()
            service.reason = _("r%(n)d: replicas keep failing; not replaced until one is redeployed. %(why)s") % {
                "n": revision.number, "why": last.reason if last else "",
            }  # fmt: skip
            service.save(update_fields=["reason"])
            return
        start_replicas(revision, wanted - len(live))
    elif len(live) > wanted:
        # Starting ones go first (they serve nothing yet), then the newest.
        extras = sorted(live, key=lambda r: (r.status == Replica.Status.READY, -r.index))[: len(live) - wanted]
        stop_replicas(extras, _("scaled down"))


def _refresh_status(service: InferenceService) -> None:
    if service.status == ServiceStatus.STOPPED:
        return
    rolling = service.revisions.filter(status=Revision.Status.ROLLING_OUT, role=Revision.Role.CURRENT).exists()
    current = service.current_revision
    if rolling:
        status = ServiceStatus.DEPLOYING
    elif current is None:
        last = service.revisions.order_by("-number").first()
        status = (
            ServiceStatus.FAILED
            if last is not None and last.status == Revision.Status.FAILED
            else (ServiceStatus.PENDING)
        )
    else:
        counts = dict.fromkeys(Replica.Status.values, 0)
        for value in current.replicas.values_list("status", flat=True):
            counts[value] += 1
        ready, starting = counts[Replica.Status.READY], counts[Replica.Status.STARTING]
        if ready >= wanted_replicas(current):
            status = ServiceStatus.READY
        elif ready > 0:
            status = ServiceStatus.DEGRADED
        elif starting:
            status = ServiceStatus.DEPLOYING
        else:
            status = ServiceStatus.FAILED
    if status != service.status:
        service.status = status
        service.save(update_fields=["status"])


# --- The periodic repair ------------------------------------------------------------------------------------------


def reconcile() -> dict[str, int]:
    """One level-triggered pass over every service with something running or rolling out: workloads whose end was
    not reported are recorded, drained replicas stopped, starting ones probed, then each service advanced."""
    active = Replica.objects.filter(status__in=[*LIVE, Replica.Status.STOPPING]).exclude(handle="")
    by_runtime: dict[str, list[Replica]] = {}
    for replica in active.select_related("revision"):
        by_runtime.setdefault(replica.revision.config.get("runtime") or "local", []).append(replica)
    ended = 0
    for name, replicas in by_runtime.items():
        runtime, hosting = get_runtime(name), hosting_for(name)
        runtime.repair()  # the local runtime: workloads of dead agents are lost (their replicas end below)
        statuses = runtime.poll_many([r.handle for r in replicas])
        for replica in replicas:
            status = statuses.get(replica.handle)
            if status is not None and status.phase.finished:
                ended += record_end(replica.pk, replica.handle, status)
            elif status is not None and status.phase == Phase.RUNNING and not hosting.probes_readiness:
                mark_ready(replica.pk)  # running on a cluster means ready (its readiness probe passed)
    stopped = cancel_due()
    ready = check_starting()
    service_ids = set(
        Revision.objects.filter(status__in=[Revision.Status.ROLLING_OUT, Revision.Status.READY]).values_list(
            "service_id", flat=True
        )
    )
    for service_id in service_ids:
        try:
            advance(service_id)
        except Exception:  # one broken service must not stop the others' repair
            logger.exception("advancing service %s failed", service_id)
    return {"ended": ended, "stopped": stopped, "ready": ready, "services": len(service_ids)}
