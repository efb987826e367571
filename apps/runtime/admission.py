"""Whether a project may run something now, and where: the one place the rules about resources are applied.

Two questions, each answered here and nowhere else:

- `too_large(request, limits)`: can it *ever* run? A pipeline node, a notebook or a service's minimum replicas that
  alone ask for more than the project's quota (`quota_limits`) — or, for pipeline nodes, more than the largest place
  its work can run (`node_limits`) — is refused when it is saved, with a message per amount naming the limit.
- `admit(project, request, in_use=…, pools=…)`: can it run *now*? The project's quota after what it holds
  (`Quota.what_would_exceed`), then the first pool of the project's runtime with room (`apps/runtime/placement.py`:
  this machine's agent, or a cluster bound to the project — never the portal host for a project on Kubernetes).
  The queue (apps/jobs/dispatcher.py) asks for each waiting task, a notebook's start for itself.

Counting what a project holds is the callers' business (the queue counts a whole pass at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from apps.runtime.placement import Pool, Pools, runtime_name_for
from portal.lib.resources import UNLIMITED, Resources, Shortfall, describe_need, number


@dataclass(frozen=True)
class Limits:
    """The most one request may ask for, and what sets each amount ("the project's quota", "the capacity of this
    machine") for the messages."""

    amounts: Resources = field(default_factory=lambda: Resources.of(UNLIMITED, UNLIMITED, UNLIMITED))
    sources: dict[str, str] = field(default_factory=dict)
    # The runtime the work goes to ("local", "kubernetes"; "" when unknown): how many replicas hold a distributed
    # template's resources may depend on it (workload.total_replicas).
    runtime: str = ""

    def source(self, name: str) -> str:
        return self.sources.get(name) or _("the project's quota")

    def to_json(self) -> dict[str, Any]:
        """For the pipeline editor's script: {"cpu", "memory_bytes", "gpu"} (None: unlimited) and their "sources"."""
        keys = {"cpu": "cpu", "memory": "memory_bytes", "gpu": "gpu"}
        amounts = {
            key: (None if self.amounts.amount(name) == UNLIMITED else self.amounts.amount(name))
            for name, key in keys.items()
        }
        if amounts["memory_bytes"] is not None:
            amounts["memory_bytes"] = int(amounts["memory_bytes"])
        sources = {keys[name]: source for name, source in self.sources.items() if amounts[keys[name]] is not None}
        return {**amounts, "sources": sources}


def quota_limits(project) -> Limits:
    """The project's quota as limits (nothing limited without one)."""
    quota = getattr(project, "quota", None)
    if quota is None:
        return Limits()
    limits = quota.limits
    return Limits(limits, {name: _("the project's quota") for name in ("cpu", "memory", "gpu")})


def node_limits(project, pools: Pools | None = None) -> Limits:
    """The smaller of the project's quota and the capacity of the largest place its work runs (this machine's agent,
    or its largest bound cluster on Kubernetes; a capacity not known now limits nothing)."""
    quota = quota_limits(project)
    pools = pools or Pools()
    largest: dict[str, tuple[float, str]] = {}
    for pool in pools.of(project):
        _free, capacity = pools.free(pool)
        if capacity is None:
            continue
        where = (
            _("the capacity of cluster %(name)s") % {"name": pool.cluster}
            if pool.cluster
            else _("the capacity of this machine")
        )
        for name in ("cpu", "memory", "gpu"):
            total = capacity.total.amount(name)
            if name not in largest or total > largest[name][0]:
                largest[name] = (total, where)
    amounts = {name: quota.amounts.amount(name) for name in ("cpu", "memory", "gpu")}
    sources = dict(quota.sources)
    for name, (total, where) in largest.items():
        if total < amounts[name]:
            amounts[name], sources[name] = total, where
    return Limits(Resources.of(amounts["cpu"], amounts["memory"], amounts["gpu"]), sources, runtime_name_for(project))


def too_large(request: Resources, limits: Limits, *, replicas: int = 1) -> dict[str, str]:
    """Why `request` (per replica; `replicas` of it) alone can never run, by amount ("cpu", "memory", "gpu"):
    "asks for 3 CPU cores (3 replicas of 1 CPU core); the limit is 2 (the project's quota)". Empty when it fits."""
    total = request * replicas
    errors = {}
    for name in limits.amounts.exceeded_by(total):
        asked = describe_need(name, total.amount(name))
        if replicas > 1:
            each = describe_need(name, request.amount(name))
            asked = _("%(total)s (%(n)d replicas of %(each)s)") % {"total": asked, "n": replicas, "each": each}
        values = {"asked": asked, "limit": number(name, limits.amounts.amount(name)), "source": limits.source(name)}
        errors[name] = _("asks for %(asked)s; the limit is %(limit)s (%(source)s)") % values
    return errors


@dataclass(frozen=True)
class Refusal:
    """Why something cannot run now: what it waits for and why ("2 GPUs", "0 of 2 free on cluster fake")."""

    need: str
    why: str
    # The refusal as a sentence of its own, where "<need> needed — <why>" reads badly ("no agent is running …").
    sentence: str = ""

    @property
    def waiting(self) -> str:
        """As a task's waiting reason: "waiting for 2 GPUs — 0 of 2 free on cluster fake"."""
        return _("waiting for %(need)s — %(why)s") % {"need": self.need, "why": self.why}

    def __str__(self) -> str:
        return self.sentence or _("%(need)s needed — %(why)s") % {"need": self.need, "why": self.why}


@dataclass(frozen=True)
class Admission:
    """Where it runs (`pool`), or why not (`refusal`; `shortfall` when the project's quota is what refuses)."""

    pool: Pool | None = None
    refusal: Refusal | None = None
    shortfall: Shortfall | None = None
    # Every pool's refusal when none had room, in the order they were tried.
    refusals: list[Refusal] = field(default_factory=list)


def admit(
    project,
    request: Resources,
    *,
    in_use: Resources | None,
    pools: Pools,
    usable: Callable[[Pool], Refusal | None] | None = None,
    replica: Resources | None = None,
    replicas: int = 1,
    quota: bool = True,
) -> Admission:
    """Whether `request` may start now: within the project's quota after `in_use` (what the project holds), and
    in the first pool of its runtime with room (free capacity as `pools` has it in this pass; the caller debits
    the pool it uses with `pools.take`). `usable(pool)`: a refusal of the caller's own for a pool (a notebook needs
    the cluster's work volume claim). `replica` (× `replicas` = `request`): where the pool reports its nodes, all
    the replicas must fit on them now (a gang: all or none), not only in its total. `quota=False`: room only (a task
    borrowing above its quota, apps/jobs/borrowing.py)."""
    limits = getattr(project, "quota", None) if quota else None
    if limits is not None:
        shortfalls = limits.what_would_exceed(request, in_use)
        if shortfalls:
            first = shortfalls[0]
            return Admission(refusal=Refusal(first.need, _("quota %(used)s/%(limit)s in use") % {
                "used": number(first.name, first.in_use), "limit": number(first.name, first.limit),
            }), shortfall=first)  # fmt: skip
    candidates = pools.of(project)
    if not candidates:
        why = _("the project runs on Kubernetes and no enabled cluster is bound to it")
        refusal = Refusal(_("a cluster"), why, sentence=why)
        return Admission(refusal=refusal, refusals=[refusal])
    refusals = []
    for pool in candidates:
        refusal = (usable(pool) if usable else None) or _no_room(request, pool, pools, replica, replicas)
        if refusal is None:
            return Admission(pool=pool)
        refusals.append(refusal)
    return Admission(refusal=refusals[0], refusals=refusals)


def _no_room(
    request: Resources, pool: Pool, pools: Pools, replica: Resources | None = None, replicas: int = 1
) -> Refusal | None:
    if request.is_none:  # needs nothing: the cheaper question of whether the pool takes work at all
        return None if pools.ready(pool) else unavailable(pool)
    free, capacity = pools.free(pool)
    if capacity is None or free is None:
        return unavailable(pool)
    for name in free.exceeded_by(request):
        left = max(free.amount(name), 0)
        if name == "memory":
            why = _("%(free)s free on %(where)s") % {"free": number(name, left), "where": pool.label}
        else:
            why = _("%(free)s of %(total)s free on %(where)s") % {
                "free": number(name, left), "total": number(name, capacity.total.amount(name)), "where": pool.label,
            }  # fmt: skip
        return Refusal(describe_need(name, request.amount(name)), why)
    if replica is not None and pools.placement(pool, replica, replicas) is None:
        name = next((n for n in ("gpu", "cpu", "memory") if request.amount(n)), "cpu")
        if replicas > 1:
            why = _("free in total on %(where)s, but not on nodes that take all %(n)d replicas at once") % {
                "where": pool.label, "n": replicas,
            }  # fmt: skip
        else:
            why = _("free in total on %(where)s, but on no node (or whole idle nodes) that takes it") % {
                "where": pool.label
            }
        return Refusal(describe_need(name, request.amount(name)), why)
    return None


def unavailable(pool: Pool) -> Refusal:
    """A pool that takes no work now: its cluster's nodes are unknown, or no agent runs on this machine."""
    if pool.cluster:
        why = _("its nodes are unknown or no controller is running (start it with `manage.py runkube`)")
        sentence = _("cluster %(name)s is not reachable: %(why)s") % {"name": pool.cluster, "why": why}
        return Refusal(_("cluster %(name)s") % {"name": pool.cluster}, why, sentence)
    why = _("no agent is running (start it with `manage.py runagent`)")
    sentence = _("no agent is running on this machine (start it with `manage.py runagent`)")
    return Refusal(_("the runtime"), why, sentence)
