"""What a project's workloads hold of its quota, counted by the apps that own them.

Pipeline tasks come and go through the queue (apps/jobs/dispatcher.py), which counts them itself; notebooks and
model servers hold their CPU, memory and GPUs for as long as they run, so every quota decision adds them: the
queue (a task waits while a notebook holds the project's GPUs), a notebook's start (apps/notebooks/capacity.py) and
a service's scale-up (apps/serving/autoscale.py).

projects is below the apps whose rows hold resources, so it does not read their tables: each app registers, from
its AppConfig.ready(), a counter of what its active rows hold per project (`register_holding`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from portal.lib.resources import Resources

# counter(project ids, pk of this kind's row to leave out or None) -> (project id, what one active row holds)...
Counter = Callable[[set[int], int | None], Iterable[tuple[int, Resources]]]


@dataclass(frozen=True)
class Holding:
    kind: str  # the kind of row ("notebook", "replica", "task"), as `except_` names it
    count: Counter
    queued: bool  # rows the queue admits and counts itself (pipeline tasks): `held` leaves them out


_holdings: dict[str, Holding] = {}


def register_holding(kind: str, count: Counter, *, queued: bool = False) -> None:
    """Called from an AppConfig.ready(): active rows of `kind` hold what `count` says of their project's quota."""
    _holdings[kind] = Holding(kind, count, queued)


def _total(project_ids: Iterable[int], holdings: Iterable[Holding], except_: tuple[str, int] | None) -> dict:
    ids = set(project_ids)
    if not ids:
        return {}
    totals: dict[int, Resources] = defaultdict(Resources.none)
    for holding in holdings:
        left_out = except_[1] if except_ is not None and except_[0] == holding.kind else None
        for project_id, resources in holding.count(ids, left_out):
            totals[project_id] += resources
    return dict(totals)


def held(project_ids: Iterable[int], *, except_: tuple[str, int] | None = None) -> dict[int, Resources]:
    """What the long-lived sessions (running notebooks, live serving replicas) of each project hold; projects
    holding nothing are absent. `except_=(kind, pk)`: leave that row out (a notebook being started)."""
    return _total(project_ids, (h for h in _holdings.values() if not h.queued), except_)


def in_use(project, *, except_: tuple[str, int] | None = None) -> Resources:
    """What the project's active tasks, notebooks and model servers hold."""
    return _total([project.pk], _holdings.values(), except_).get(project.pk, Resources.none())
