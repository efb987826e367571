"""Replaying a trace on a simulated cluster: a discrete-event loop that moves the virtual clock to the next event (a
submission or a completion) and lets a policy decide, then what the schedule achieved.

A policy has `submit(job)` (a job arrives; start what it decides) and `ended(workload)` (one ended; start what it
decides). `Fifo` is the baseline: strict submission order, the head blocks everything behind it, capacity is all it
checks (no quotas, no priorities). `apps.jobs.simulation.PortalDispatcher` is the portal's own queue.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from apps.runtime.simulated.cluster import SimCluster, SimWorkload
from apps.runtime.simulated.traces import SIZE_BUCKETS, Job, Trace
from apps.runtime.workload import Phase


class Policy(Protocol):
    label: str

    def submit(self, job: Job) -> None: ...

    def ended(self, workload: SimWorkload) -> None: ...


class Fifo:
    """The baseline: first come, first served, strictly — nothing starts while the oldest waiting job does not fit.
    It looks at free capacity only (no quotas, no priorities)."""

    label = "FIFO (baseline)"

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.queue: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        self.queue.append(job)
        self._drain()

    def ended(self, workload: SimWorkload) -> None:
        self._drain()

    def _drain(self) -> None:
        while self.queue and self.cluster.can_place(self.queue[0].gpus, self.queue[0].cpus, self.queue[0].memory):
            job = self.queue.popleft()
            self.cluster.submit(f"fifo-{job.id}", job.gpus, job.cpus, job.memory, job.duration, key=str(job.id))


class AnyFit(Fifo):
    """A reference, not a policy to run: every waiting job that fits starts, oldest first (no quotas, no priorities,
    no reservations). Replayed on one pool of all the GPUs (`one_pool`: no nodes to fragment the room) it is about
    the most GPU time a queue that never preempts could keep busy on a trace: what is left idle then is idle because
    nothing that fits was waiting."""

    label = "any fit, one pool, no quotas (bound)"

    def _drain(self) -> None:
        waiting: deque[Job] = deque()
        for job in self.queue:
            if self.cluster.can_place(job.gpus, job.cpus, job.memory):
                self.cluster.submit(f"any-{job.id}", job.gpus, job.cpus, job.memory, job.duration, key=str(job.id))
            else:
                waiting.append(job)
        self.queue = waiting


def one_pool(cluster: SimCluster) -> SimCluster:
    """A cluster of one node with all of `cluster`'s GPUs, cores and memory."""
    total = cluster.total
    return SimCluster(1, cluster.total_gpus, cpus_per_node=total.cpu, memory_per_node=int(total.memory))


@dataclass
class Outcome:
    """What happened to the jobs of one replay (times in virtual seconds) and what it cost (wall seconds)."""

    label: str
    trace: Trace
    cluster: SimCluster
    wall_s: float
    started: dict[int, float] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)

    @property
    def unfinished(self) -> int:
        return len(self.trace.jobs) - len(self.ended)


def replay(trace: Trace, cluster: SimCluster, policy: Policy) -> Outcome:
    """Run the trace to its end: every job submitted at its time and, when the policy starts it, run for its
    duration. Stops when no event is left (jobs a policy never starts are counted unfinished)."""
    jobs = sorted(trace.jobs, key=lambda j: (j.submit, j.id))
    started_wall = time.perf_counter()
    i = 0
    while True:
        next_end = cluster.next_end()
        if i < len(jobs) and (next_end is None or jobs[i].submit <= next_end):
            cluster.advance_to(jobs[i].submit)
            policy.submit(jobs[i])
            i += 1
        elif next_end is not None:
            policy.ended(cluster.finish_next())
        else:
            break
    outcome = Outcome(policy.label, trace, cluster, time.perf_counter() - started_wall)
    for w in cluster.workloads.values():
        # A preempted job has several workloads: it waited until its first start and ended with the one that succeeded.
        if w.key and w.started_at is not None:
            key = int(w.key)
            outcome.started[key] = min(outcome.started.get(key, w.started_at), w.started_at)
            if w.phase == Phase.SUCCEEDED:
                outcome.ended[key] = w.ended_at
    return outcome


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (nan for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


@dataclass
class Summary:
    label: str
    jobs: int
    unfinished: int
    utilisation: float  # busy GPU-seconds / (GPUs × span of submissions)
    mean_jct: float
    p95_jct: float
    p95_wait: dict[str, float]  # by size bucket
    starvation: float  # the longest wait of a job of the largest size bucket
    quota_share: dict[str, float]  # GPU-seconds held / (quota × span), by project
    wall_s: float
    preempted: int = 0  # workloads cancelled while running (preemptions)
    lost: float = 0.0  # the GPU-seconds they had run, / the cluster's GPU-seconds over the span

    @property
    def useful(self) -> float:
        """The utilisation less the work preempted and run again (all of it, also what was lost after the span: a
        lower bound)."""
        return self.utilisation - self.lost


def summarise(outcome: Outcome) -> Summary:
    trace, span = outcome.trace, outcome.trace.span or 1.0
    jobs = {j.id: j for j in trace.jobs}
    jct = [outcome.ended[i] - jobs[i].submit for i in outcome.ended]
    # A job never started waits until the replay's end: it counts, not vanishes.
    wait = {i: outcome.started.get(i, outcome.cluster.now) - j.submit for i, j in jobs.items()}
    by_bucket: dict[str, list[float]] = {name: [] for name, _lo, _hi in SIZE_BUCKETS}
    for i, j in jobs.items():
        by_bucket[j.bucket].append(wait[i])
    largest = SIZE_BUCKETS[-1][0]
    held: dict[str, float] = dict.fromkeys(trace.projects, 0.0)
    for i, start in outcome.started.items():
        j = jobs[i]
        end = outcome.ended.get(i, outcome.cluster.now)
        held[j.project] += j.gpus * max(0.0, min(end, span) - min(start, span))
    shares = {p: held[p] / (q * span) for p, q in trace.quotas.items() if q}
    return Summary(
        label=outcome.label,
        jobs=len(jobs),
        unfinished=outcome.unfinished,
        utilisation=outcome.cluster.busy_gpu_seconds(span) / (outcome.cluster.total_gpus * span),
        mean_jct=sum(jct) / len(jct) if jct else math.nan,
        p95_jct=percentile(jct, 95),
        p95_wait={name: percentile(values, 95) for name, values in by_bucket.items()},
        starvation=max(by_bucket[largest], default=math.nan),
        quota_share=shares,
        wall_s=outcome.wall_s,
        preempted=sum(
            1 for w in outcome.cluster.workloads.values() if w.phase == Phase.CANCELLED and w.started_at is not None
        ),
        lost=outcome.cluster.lost_gpu_seconds / (outcome.cluster.total_gpus * span),
    )
