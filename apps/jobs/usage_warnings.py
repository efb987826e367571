"""Warnings about how a task uses what it holds, raised from its resource samples as they arrive (`TaskSink`).

- `low_gpu`: a replica's GPU utilisation stayed under `LOW_GPU_PERCENT` for `LOW_GPU_SECONDS` on end (GPUs held
  and idle are the costliest waste of a cluster).
- `memory_near_limit`: a replica's memory passed `MEMORY_NEAR_LIMIT` of its limit (the next allocation may be its
  last: the limit is enforced as Kubernetes does, OOMKilled).

A warning is raised once per kind and replica and kept on the task attempt (`TaskRun.resource_warnings`, shown on the
run page and in the API): it is a fact of the attempt, not a state that flickers with each sample. Pure logic, no
database: the sink stores what `observe` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.utils.translation import gettext as _

from portal.lib.resources import format_bytes

LOW_GPU_PERCENT = 20.0
LOW_GPU_SECONDS = 300.0
MEMORY_NEAR_LIMIT = 0.9
LOW_GPU, MEMORY_NEAR = "low_gpu", "memory_near_limit"


def replica_words(replica: str) -> str:
    return _("replica %(name)s") % {"name": replica} if replica not in ("", "0") else _("the task")


@dataclass
class UsageWatch:
    """The running conditions of one task attempt's replicas. `memory_limit`: bytes per replica (0: none)."""

    memory_limit: int = 0
    raised: set[tuple[str, str]] = field(default_factory=set)
    low_since: dict[str, datetime] = field(default_factory=dict)

    def observe(self, replica: str, ts: datetime, rss_bytes: int, gpu_percent: float | None) -> list[dict[str, str]]:
        """New warnings this sample raises: [{"kind", "replica", "reason", "at"}]."""
        found: list[dict[str, str]] = []
        if gpu_percent is not None and gpu_percent < LOW_GPU_PERCENT:
            since = self.low_since.setdefault(replica, ts)
            if (ts - since).total_seconds() >= LOW_GPU_SECONDS:
                minutes = round(LOW_GPU_SECONDS / 60)
                reason = _("GPU utilisation of %(who)s stayed under %(limit)d%% for %(minutes)d minutes") % {
                    "who": replica_words(replica),
                    "limit": LOW_GPU_PERCENT,
                    "minutes": minutes,
                }
                found += self._raise(LOW_GPU, replica, reason, ts)
        else:
            self.low_since.pop(replica, None)
        if self.memory_limit and rss_bytes > MEMORY_NEAR_LIMIT * self.memory_limit:
            reason = _("%(who)s used %(used)s of its %(limit)s memory limit (over %(share)d%%)") % {
                "who": replica_words(replica),
                "used": format_bytes(rss_bytes),
                "limit": format_bytes(self.memory_limit),
                "share": round(MEMORY_NEAR_LIMIT * 100),
            }
            found += self._raise(MEMORY_NEAR, replica, reason[:1].upper() + reason[1:], ts)
        return found

    def _raise(self, kind: str, replica: str, reason: str, ts: datetime) -> list[dict[str, str]]:
        if (kind, replica) in self.raised:
            return []
        self.raised.add((kind, replica))
        return [{"kind": kind, "replica": replica, "reason": reason, "at": ts.isoformat()}]
