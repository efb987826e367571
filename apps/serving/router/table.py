"""The routing table: per service, who may call it and the ready replicas of the revisions taking traffic.

Loaded from the database on first use and reloaded in the background once `PORTAL_SERVING_ROUTER_TABLE_TTL`
seconds (default 2) have passed (requests meanwhile use the table they have: none waits for the database;
auth.TTLCache), so a change made by any process (a replica ready or stopped, a canary weight moved) takes
effect within that and a query; `invalidate()` drops it at once (the control plane may call it in the web
process, tests do). A replica keeps its router-side state (requests outstanding, "refused recently") across
reloads.

Balancing: least outstanding requests among a revision's replicas, ties broken round-robin. A replica that
refused a connection is avoided for `PORTAL_SERVING_ROUTER_RETRY_AFTER` seconds unless nothing else is left.
Canary and shadow splits are smooth weighted counters rather than coin tosses: of any N consecutive requests
⌊N·p/100⌋ or ⌈N·p/100⌉ take the canary, so 0 % sends none and 100 % sends all.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from apps.serving import stats
from apps.serving.router.upstream import Pool

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$")


@dataclass(eq=False)
class Replica:
    """One ready replica as the router sees it."""

    id: int
    index: int
    host: str
    port: int
    outstanding: int = 0
    refused_until: float = 0.0
    pool: Pool | None = None  # created on the router's event loop at first use

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(eq=False)
class RevisionRoute:
    id: int
    number: int
    replicas: list[Replica]
    meter: stats.RevisionMeter
    _turn: int = 0

    def pick(self, exclude: Replica | None = None) -> Replica | None:
        """The replica with the fewest requests outstanding (one that refused lately only if no other is left)."""
        count = len(self.replicas)
        if count == 0:
            return None
        self._turn += 1
        best: Replica | None = None
        best_key: tuple[bool, int] | None = None
        now = time.monotonic()
        for i in range(count):
            replica = self.replicas[(self._turn + i) % count]
            if replica is exclude:
                continue
            key = (replica.refused_until > now, replica.outstanding)
            if best_key is None or key < best_key:
                best, best_key = replica, key
        return best


@dataclass(eq=False)
class ServiceRoute:
    """A service as the router needs it; `exists` False for a name that resolves to nothing (cached too)."""

    project_slug: str
    name: str
    exists: bool = False
    id: int = 0
    project_id: int = 0
    auth: str = "token"
    key_digest: str = ""
    status: str = ""
    reason: str = ""
    current: RevisionRoute | None = None
    canary: RevisionRoute | None = None
    canary_percent: int = 0
    shadow: RevisionRoute | None = None
    shadow_percent: int = 0
    log_percent: int = 0  # payload logging (apps/serving/payloads.py)
    log_cap: int = 0  # bytes
    log_keep: int = 0
    _canary_n: int = 0
    _shadow_n: int = 0
    _log_n: int = 0

    def choose(self) -> RevisionRoute | None:
        """The revision this request goes to: the canary for `canary_percent` of them, else the current one;
        whichever has ready replicas when the other has none."""
        current, canary = self.current, self.canary
        if canary is None or not canary.replicas:
            return current if current is not None and current.replicas else None
        if current is None or not current.replicas:
            return canary
        n, self._canary_n = self._canary_n, self._canary_n + 1
        return canary if (n + 1) * self.canary_percent // 100 != n * self.canary_percent // 100 else current

    def other(self, revision: RevisionRoute) -> RevisionRoute | None:
        """The other revision taking traffic (where a failed request may go next)."""
        for candidate in (self.current, self.canary):
            if candidate is not None and candidate is not revision and candidate.replicas:
                return candidate
        return None

    def mirror(self) -> RevisionRoute | None:
        """The shadow revision when this request's copy should go there (`shadow_percent` of requests)."""
        shadow = self.shadow
        if shadow is None or not shadow.replicas or self.shadow_percent <= 0:
            return None
        n, self._shadow_n = self._shadow_n, self._shadow_n + 1
        return shadow if (n + 1) * self.shadow_percent // 100 != n * self.shadow_percent // 100 else None

    def sample(self) -> bool:
        """Whether this request is logged (`log_percent` of them, by the same smooth counter as the canary)."""
        percent = self.log_percent
        if percent <= 0:
            return False
        n, self._log_n = self._log_n, self._log_n + 1
        return (n + 1) * percent // 100 != n * percent // 100

    def revisions(self) -> list[tuple[str, RevisionRoute, int]]:
        """(role, revision, traffic percent) of the revisions taking traffic, for the service's info page."""
        out = []
        if self.current is not None:
            share = 100 - self.canary_percent if self.canary is not None else 100
            out.append(("current", self.current, share))
        if self.canary is not None:
            out.append(("canary", self.canary, self.canary_percent))
        if self.shadow is not None:
            out.append(("shadow", self.shadow, self.shadow_percent))
        return out

    def replicas(self) -> list[Replica]:
        return [r for rev in (self.current, self.canary, self.shadow) if rev is not None for r in rev.replicas]


def parse_upstream(upstream: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            return None
        return parts.hostname, parts.port
    except ValueError:
        return None


def load(project_slug: str, name: str) -> dict[str, Any] | None:
    """The rows behind a service's route (run on a worker thread): None when there is no such service."""
    from apps.serving.models import InferenceService, Replica, Revision

    if not (SLUG.match(project_slug) and SLUG.match(name)):
        return None
    fields = ["id", "project_id", "auth", "key_digest", "status", "reason", "canary_percent", "shadow_percent"]
    fields += ["current_revision_id", "canary_revision_id", "shadow_revision_id"]
    fields += ["payload_log_percent", "payload_log_max_kb", "payload_log_keep"]
    service = InferenceService.objects.filter(project__slug=project_slug, name=name).values(*fields).first()
    if service is None:
        return None
    ids = [service[k] for k in ("current_revision_id", "canary_revision_id", "shadow_revision_id") if service[k]]
    service["numbers"] = dict(Revision.objects.filter(pk__in=ids).values_list("pk", "number"))
    service["replicas"] = list(
        Replica.objects.filter(revision_id__in=ids, status=Replica.Status.READY)
        .order_by("revision_id", "index")
        .values_list("revision_id", "id", "index", "upstream")
    )
    return service


def build(project_slug: str, name: str, row: dict[str, Any] | None, previous: ServiceRoute | None) -> ServiceRoute:
    """A route from `load()`'s rows, keeping the state of replicas that `previous` already knew."""
    route = ServiceRoute(project_slug, name)
    if row is None:
        return route
    known = {r.id: r for r in previous.replicas()} if previous is not None else {}
    by_revision: dict[int, list[Replica]] = {}
    for revision_id, replica_id, index, upstream in row["replicas"]:
        address = parse_upstream(upstream)
        if address is None:
            continue
        replica = known.pop(replica_id, None)
        if replica is None or (replica.host, replica.port) != address:
            replica = Replica(replica_id, index, *address)
        by_revision.setdefault(revision_id, []).append(replica)
    for gone in known.values():  # no longer ready: its idle connections go
        if gone.pool is not None:
            gone.pool.close()

    def revision(key: str) -> RevisionRoute | None:
        revision_id = row[key]
        if not revision_id or revision_id not in row["numbers"]:
            return None
        number = row["numbers"][revision_id]
        meter = stats.meter(revision_id, number, project_slug, name)
        return RevisionRoute(revision_id, number, by_revision.get(revision_id, []), meter)

    route.exists = True
    route.id, route.project_id = row["id"], row["project_id"]
    route.auth, route.key_digest = row["auth"], row["key_digest"]
    route.status, route.reason = row["status"], row["reason"]
    route.current = revision("current_revision_id")
    route.canary = revision("canary_revision_id")
    route.canary_percent = row["canary_percent"] if route.canary is not None else 0
    route.shadow = revision("shadow_revision_id")
    route.shadow_percent = row["shadow_percent"] if route.shadow is not None else 0
    route.log_percent = row["payload_log_percent"]
    route.log_cap, route.log_keep = row["payload_log_max_kb"] << 10, row["payload_log_keep"]
    if previous is not None:  # keep the split's phase across reloads
        route._canary_n, route._shadow_n = previous._canary_n, previous._shadow_n
        route._log_n = previous._log_n
    return route
