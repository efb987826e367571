"""The `local` runtime: workloads are rows that a `runagent` process on this machine claims and runs."""

from __future__ import annotations

import time

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.runtime.base import send_wakeups
from apps.runtime.local.agent import mark_lost, running_here
from apps.runtime.models import Agent, LocalWorkload, heartbeat_cutoff
from apps.runtime.rows import ACTIVE, RowRuntime
from apps.runtime.workload import Capacity, Phase, Status, Workload, demand, total_replicas
from portal.lib.resources import Resources


def live_agents():
    """Live local agents (kubernetes controllers heartbeat in the same table, with their own kind)."""
    return Agent.objects.filter(kind=Agent.Kind.LOCAL, heartbeat_at__gte=heartbeat_cutoff(), stopped_at__isnull=True)


_addresses: tuple[float, list[str]] = (0.0, [])
ADDRESS_TTL = 0.25  # seconds: a busy dispatcher looks agents up a few times a second, not per task
_ready_at = float("-inf")


def wake_agents() -> None:
    """Nudge every live agent (best effort: agents also look for work once a second)."""
    global _addresses
    now = time.monotonic()
    if now - _addresses[0] > ADDRESS_TTL:
        _addresses = (now, list(live_agents().values_list("address", flat=True)))
    send_wakeups(_addresses[1])


class LocalRuntime(RowRuntime):
    name = "local"
    model = LocalWorkload

    def submit_many(self, workloads: list[Workload]) -> list[str]:
        # Where an agent runs in this process (the orchestrator advances runs on the agent's notifier thread), it
        # takes what it has room for straight away: written as claimed by it, started after the commit. The rest
        # wait for any agent to claim them.
        here = running_here()
        taken = [w.uid for w in workloads[: here.room()]] if here is not None else []
        agent_id = here.agent.pk if here is not None else None
        rows = [LocalWorkload(uid=w.uid, spec=w.as_dict(), agent_id=agent_id if i < len(taken) else None)
                for i, w in enumerate(workloads)]  # fmt: skip
        # A uid submitted before is the same workload (idempotent): the conflict is ignored.
        LocalWorkload.objects.bulk_create(rows, ignore_conflicts=True)
        if taken:
            transaction.on_commit(lambda: here.take(taken))
        if len(taken) < len(workloads):
            transaction.on_commit(wake_agents)  # an agent woken before the commit would find nothing
        return [w.uid for w in workloads]

    def rows_to_poll(self, handles: list[str]) -> QuerySet[LocalWorkload]:
        return super().rows_to_poll(handles).select_related("agent")

    def status_of(self, row: LocalWorkload) -> Status:
        """A row its agent still holds though the agent died is lost: recorded here, as the poll finds it."""
        if row.state in ACTIVE and row.agent is not None and not self._alive(row.agent):
            mark_lost(row)
            row.refresh_from_db()
        return Status(Phase(row.state), exit_code=row.exit_code, reason=row.reason, usage=row.usage)

    def cancel_unstarted(self, handle: str) -> bool:
        unclaimed = LocalWorkload.objects.filter(uid=handle, state=LocalWorkload.State.PENDING, agent__isnull=True)
        return bool(
            unclaimed.update(state=LocalWorkload.State.CANCELLED, reason="cancelled", finished_at=timezone.now())
        )

    def wake(self) -> None:
        wake_agents()

    def ready(self) -> bool:
        """A live agent exists: one runs in this process, or one heartbeats (remembered for ADDRESS_TTL: agents
        heartbeat every 2 s and count as dead only after PORTAL_AGENT_TIMEOUT, so a quarter of a second changes
        nothing)."""
        global _ready_at
        now = time.monotonic()
        if now - _ready_at < ADDRESS_TTL or running_here() is not None:
            return True
        if live_agents().exists():
            _ready_at = now
            return True
        return False

    def capacity(self) -> Capacity | None:
        agent = live_agents().order_by("-heartbeat_at").first()
        if agent is None:
            return None
        total = agent.capacity
        used = Resources.none()
        # Only the keys that count, extracted by the database: a spec also holds the command and env.
        active = LocalWorkload.objects.filter(state__in=ACTIVE).values_list(
            "spec__resources", "spec__replicas", "spec__kind", "spec__framework"
        )
        for res, replicas, kind, framework in active:
            count = total_replicas(kind, replicas, framework=framework or "", runtime="local")
            used += demand(Resources.from_json(res), count)
        total = Resources.of(total.get("cpu"), total.get("memory_bytes"), total.get("gpu"))
        return Capacity.of(free=total - used, total=total)

    @staticmethod
    def _alive(agent: Agent) -> bool:
        return agent.stopped_at is None and agent.heartbeat_at >= heartbeat_cutoff()

    def repair(self) -> int:
        """Mark workloads of dead agents lost (the reconcile loop calls this). Returns how many."""
        dead = LocalWorkload.objects.filter(state__in=ACTIVE, agent__isnull=False).filter(
            Q(agent__heartbeat_at__lt=heartbeat_cutoff()) | Q(agent__stopped_at__isnull=False)
        )
        return sum(mark_lost(row) for row in dead.select_related("agent"))
