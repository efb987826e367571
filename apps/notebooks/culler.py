"""The idle culler, and the level-triggered repair of notebooks whose events were lost.

Idle means no kernel or terminal activity: a busy kernel is activity now; otherwise the newest `last_activity` of
the server's kernels and terminals. That timestamp is on the server's clock, which is not ours (a pod's drifts, and
tests move ours ahead), so the culler also remembers the newest one it saw (`seen_activity`): when it advanced since
the previous pass, something happened since then, and that counts as activity at this pass. An open browser tab
alone is not activity (JupyterLab polls the API while it is visible); running code or typing in a terminal is.

A server that does not answer is not idle: the runtime's listener records how it ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from apps.accounts.services import notify
from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.runtime.base import Runtime, get_runtime
from apps.runtime.workload import Phase

logger = logging.getLogger(__name__)

POLL_TIMEOUT = 3.0
POLL_THREADS = 8

# Called with each notebook the culler stopped, after the commit: how a higher app (apps/alerts) hears of it
# without this one importing it. A listener must be quick and must not raise.
_culled: list[Callable[[Notebook], None]] = []


def on_culled(listener: Callable[[Notebook], None]) -> None:
    if listener not in _culled:
        _culled.append(listener)


def _notify_culled(nb: Notebook) -> None:
    for listener in _culled:
        try:
            listener(nb)
        except Exception:
            logger.exception("notebook-culled listener %s failed for notebook %s", listener, nb.pk)


@dataclass(frozen=True)
class Activity:
    """What a server said about its kernels and terminals."""

    busy: bool
    latest: datetime | None  # the newest last_activity of a kernel or terminal (the server's clock)
    kernels: int
    terminals: int


def effective_timeout(nb: Notebook) -> int:
    """Minutes: the notebook's own, else its project's, else the portal's (shorter for GPU notebooks)."""
    if nb.idle_timeout:
        return nb.idle_timeout
    if nb.project.notebook_idle_timeout:
        return nb.project.notebook_idle_timeout
    if nb.gpu and nb.gpu > 0:
        return settings.PORTAL_NOTEBOOK_GPU_IDLE_TIMEOUT
    return settings.PORTAL_NOTEBOOK_IDLE_TIMEOUT


def _get(nb: Notebook, path: str) -> object:
    response = requests.get(
        f"{nb.upstream}{nb.base_path}{path}",
        # Our polls must not count as the user's activity in the server's own bookkeeping.
        params={"no_track_activity": "1"},
        headers={"Authorization": f"token {nb.token}"},
        timeout=POLL_TIMEOUT,
    )
    response.raise_for_status()
    return response.json()


def poll_activity(nb: Notebook) -> Activity | None:
    """/api/status, /api/kernels and /api/terminals of the server; None when it does not answer properly."""
    if not nb.upstream or not nb.token:
        return None
    try:
        _get(nb, "api/status")
        kernels = _get(nb, "api/kernels")
        terminals = _get(nb, "api/terminals")
    except (requests.RequestException, ValueError):
        return None
    if not isinstance(kernels, list) or not isinstance(terminals, list):
        return None
    stamps = [
        parsed
        for item in [*kernels, *terminals]
        if isinstance(item, dict) and (parsed := parse_datetime(str(item.get("last_activity") or "")))
    ]
    busy = any(isinstance(k, dict) and k.get("execution_state") == "busy" for k in kernels)
    return Activity(busy=busy, latest=max(stamps) if stamps else None, kernels=len(kernels), terminals=len(terminals))


def _observe(nb: Notebook, activity: Activity, now: datetime) -> bool:
    """Fold what the server said into last_activity / seen_activity; True when it counts as active now."""
    last = nb.last_activity or nb.started_at or now
    active_now = activity.busy or (
        activity.latest is not None and nb.seen_activity is not None and activity.latest > nb.seen_activity
    )
    if active_now:
        last = now
    elif activity.latest is not None:
        last = max(last, min(activity.latest, now))
    nb.last_activity = last
    if activity.latest is not None:
        nb.seen_activity = activity.latest
    return active_now


def cull_idle_notebooks(now: datetime | None = None) -> dict[str, int]:
    """One pass: repair, then warn or stop the idle. Returns how many notebooks were warned and stopped."""
    now = now or timezone.now()
    reconcile_notebooks(now)
    running = list(Notebook.objects.filter(status=Notebook.Status.RUNNING).select_related("project", "owner"))
    if not running:
        return {"warned": 0, "stopped": 0}
    with ThreadPoolExecutor(max_workers=min(POLL_THREADS, len(running))) as pool:
        reports = dict(zip([nb.pk for nb in running], pool.map(poll_activity, running), strict=True))
    warning = timedelta(minutes=settings.PORTAL_NOTEBOOK_IDLE_WARNING)
    warned = stopped = 0
    for nb in running:
        activity = reports[nb.pk]
        if activity is None:
            continue  # not answering is not idleness: the listener (or the repair pass) records its end
        active_now = _observe(nb, activity, now)
        timeout = timedelta(minutes=effective_timeout(nb))
        idle = now - nb.last_activity
        fields = {"last_activity": nb.last_activity, "seen_activity": nb.seen_activity}
        if active_now or idle < timeout - warning:
            fields["idle_warned_at"] = None  # a later idle spell warns again
        still = Notebook.objects.filter(pk=nb.pk, handle=nb.handle, status=Notebook.Status.RUNNING)
        if not still.update(**fields):
            continue  # stopped meanwhile
        if idle >= timeout:
            minutes = int(idle.total_seconds() // 60)
            reason = _("stopped after %(n)d minutes idle") % {"n": minutes}
            services.stop_notebook(nb, reason=reason)
            with translation.override(nb.owner.interface_language):  # in the words of the one who reads it
                message = _("Notebook %(name)s in %(project)s was %(reason)s; its files are kept.") % {
                    "name": nb.name,
                    "project": nb.project.name,
                    "reason": _("stopped after %(n)d minutes idle") % {"n": minutes},
                }
            notify(nb.owner, message, url=services.page_url(nb))
            if _culled:
                transaction.on_commit(lambda nb=nb: _notify_culled(nb))
            stopped += 1
        elif idle >= timeout - warning and nb.idle_warned_at is None and not active_now:
            left = max(int((timeout - idle).total_seconds() // 60), 1)
            with translation.override(nb.owner.interface_language):
                message = ngettext(
                    "Notebook %(name)s in %(project)s has been idle for %(idle)d minutes and will be stopped in about "
                    "%(left)d minute. Run something in it to keep it.",
                    "Notebook %(name)s in %(project)s has been idle for %(idle)d minutes and will be stopped in about "
                    "%(left)d minutes. Run something in it to keep it.",
                    left,
                )
            idle_minutes = int(idle.total_seconds() // 60)
            values = {"name": nb.name, "project": nb.project.name, "idle": idle_minutes, "left": left}
            notify(nb.owner, message % values, url=services.page_url(nb))
            Notebook.objects.filter(pk=nb.pk, handle=nb.handle).update(idle_warned_at=now)
            warned += 1
    return {"warned": warned, "stopped": stopped}


def reconcile_notebooks(now: datetime | None = None) -> int:
    """Compare active notebooks with their runtime: record ends nobody reported (a dead agent, a lost event), mark
    running the servers that answer, fail the ones that never did. Returns how many changed."""
    now = now or timezone.now()
    active = list(
        Notebook.objects.filter(status__in=Notebook.ACTIVE)
        .exclude(Q(handle="") | Q(runtime=""))
        .select_related("project")
    )
    by_runtime: dict[str, list[Notebook]] = {}
    for nb in active:
        by_runtime.setdefault(nb.runtime, []).append(nb)
    changed = 0
    for runtime_name, notebooks in by_runtime.items():
        runtime = get_runtime(runtime_name)
        statuses = runtime.poll_many([nb.handle for nb in notebooks])
        for nb in notebooks:
            status = statuses[nb.handle]
            if status.phase.finished:
                services.record_end(nb.pk, nb.handle, status.phase, status)
                changed += 1
            elif nb.status == Notebook.Status.STARTING:
                if status.phase.value == "running" and services.ready(nb):
                    changed += services.mark_running(nb.pk, nb.handle)
                elif (now - nb.started_at).total_seconds() > settings.PORTAL_NOTEBOOK_START_TIMEOUT:
                    _fail_start(nb, runtime)
                    changed += 1
    return changed


def _fail_start(nb: Notebook, runtime: Runtime) -> None:
    """A server that never answered: stop it and say so (its log tail stays for the page)."""
    never_ran = runtime.poll(nb.handle).phase == Phase.PENDING
    runtime.cancel(nb.handle)
    seconds = {"n": settings.PORTAL_NOTEBOOK_START_TIMEOUT}
    if never_ran and not runtime.on_cluster:  # no process at all: the infrastructure's fault, not the server's
        reason = (
            _(
                "no agent started the server within %(n)d seconds (is an agent running? `manage.py runagent`); "
                "start it again once one runs"
            )
            % seconds
        )
    elif never_ran:
        reason = _("the cluster did not start the server within %(n)d seconds") % seconds
    else:
        reason = _("the server did not answer within %(n)d seconds") % seconds
    line = services.meaningful_line(nb.log_tail)
    Notebook.objects.filter(pk=nb.pk, handle=nb.handle, status=Notebook.Status.STARTING).update(
        status=Notebook.Status.FAILED,
        reason=f"{reason}: {line}" if line else reason,
        stopped_at=timezone.now(),
        upstream="",
        token=None,
    )
    services.revoke_api_token(nb)
    nb.refresh_from_db()
    services.publish_status(nb)
