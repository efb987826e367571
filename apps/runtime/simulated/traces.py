"""Job traces for the simulated cluster: a seeded generator shaped after published statistics of multi-tenant GPU
clusters (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC
2019 — Microsoft's Philly; docs/scheduling.md says which properties and which numbers are ours), and a CSV loader
so that a real trace can be replayed.

No Django here: a trace is a list of `Job`s and the quotas of its projects.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from portal.lib.resources import parse_memory

GIB = 1 << 30
DAY = 86_400.0

# GPUs per job and their shares: most jobs use one GPU, a long tail reaches 64 (Philly: jobs of 1, 2-4, 5-8 and
# more than 8 GPUs; single-GPU jobs the large majority, multi-node jobs few but holding much of the GPU time).
GPU_SIZES: tuple[tuple[int, float], ...] = (
    (1, 0.70),
    (2, 0.09),
    (4, 0.09),
    (8, 0.07),
    (16, 0.03),
    (32, 0.015),
    (64, 0.005),
)
# Durations: log-normal, heavy-tailed (minutes to days), longer for larger jobs. Median in seconds, and sigma.
DURATION_MEDIAN_S = 1_800.0
DURATION_SIGMA = 1.6
DURATION_SIZE_FACTOR = 0.25  # the median grows by this power of the GPU count (larger jobs run longer)
DURATION_MIN_S, DURATION_MAX_S = 60.0, 7 * DAY
DIURNAL_AMPLITUDE = 0.5  # arrivals at the daily peak are (1 + a) / (1 - a) = 3× those at the trough
SIZE_BUCKETS: tuple[tuple[str, int, int], ...] = (("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), (">8", 9, 1 << 30))


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the line and the column."""


@dataclass(frozen=True)
class Job:
    """One job of a trace: submitted at `submit` seconds after the trace starts, it runs for `duration` seconds once
    started and holds `gpus` GPUs, `cpus` cores and `memory` bytes for that time."""

    id: int
    submit: float
    project: str
    gpus: int
    cpus: float
    memory: int
    duration: float
    priority: int = 0
    # Whether its task may be preempted (and so borrow room above its quota, apps/jobs/borrowing.py): a generated or
    # loaded trace's jobs all may; tests make some not.
    preemptible: bool = True

    @property
    def bucket(self) -> str:
        return size_bucket(self.gpus)


@dataclass
class Trace:
    """Jobs in submission order, and each project's GPU quota (None: no quota)."""

    jobs: list[Job]
    quotas: dict[str, int | None] = field(default_factory=dict)

    @property
    def projects(self) -> list[str]:
        return sorted({job.project for job in self.jobs} | set(self.quotas))

    @property
    def span(self) -> float:
        """From the first submission (time 0) to the last."""
        return max((job.submit for job in self.jobs), default=0.0)

    def gpu_seconds(self) -> float:
        return sum(job.gpus * job.duration for job in self.jobs)


def size_bucket(gpus: int) -> str:
    for name, low, high in SIZE_BUCKETS:
        if low <= gpus <= high:
            return name
    return "0"


def _duration(rng: random.Random, gpus: int) -> float:
    median = DURATION_MEDIAN_S * gpus**DURATION_SIZE_FACTOR
    value = rng.lognormvariate(math.log(median), DURATION_SIGMA)
    return round(min(max(value, DURATION_MIN_S), DURATION_MAX_S), 1)


def _mean_gpu_seconds(max_gpus: int) -> float:
    """E[gpus × duration] of one generated job (for the arrival rate that gives a load), the log-normal's mean
    ignoring its clipping."""
    sizes = [(g, p) for g, p in GPU_SIZES if g <= max_gpus]
    total = sum(p for _g, p in sizes)
    factor = math.exp(DURATION_SIGMA**2 / 2)
    return sum(p / total * g * DURATION_MEDIAN_S * g**DURATION_SIZE_FACTOR * factor for g, p in sizes)


def generate(
    *,
    jobs: int,
    gpus: int,
    load: float = 0.9,
    teams: int = 8,
    seed: int = 0,
    gpus_per_node: int = 8,
    overcommit: float = 1.5,
    high_priority_share: float = 0.1,
) -> Trace:
    """`jobs` jobs for a cluster of `gpus` GPUs, arriving so that the GPU time asked for is `load` × what the
    cluster has over the trace's span (a load near or above 1 keeps a queue). Arrivals are a Poisson process whose
    rate follows the day (`DIURNAL_AMPLITUDE`); `teams` projects submit with Zipf-like shares (team i ∝ 1/(i+1)),
    each with a GPU quota of `overcommit` × its share of the cluster (at least the largest job it submits, at most
    the cluster). The same arguments always give the same trace."""
    if jobs < 1 or gpus < 1 or teams < 1 or load <= 0:
        raise ValueError("jobs, gpus, teams and load must be positive")
    rng = random.Random(seed)
    largest = min(max(g for g, _p in GPU_SIZES), gpus)
    sizes = [g for g, _p in GPU_SIZES if g <= largest]
    weights = [p for g, p in GPU_SIZES if g <= largest]
    weights_teams = [1 / (i + 1) for i in range(teams)]
    share = [w / sum(weights_teams) for w in weights_teams]
    names = [f"team-{i + 1:02d}" for i in range(teams)]
    quotas = {name: min(gpus, max(1, math.ceil(overcommit * s * gpus))) for name, s in zip(names, share, strict=True)}
    rate = load * gpus / _mean_gpu_seconds(largest)  # jobs per second on average over a day
    peak = rate * (1 + DIURNAL_AMPLITUDE)
    out: list[Job] = []
    t = 0.0
    while len(out) < jobs:
        t += rng.expovariate(peak)
        # Thinning: keep an arrival with probability rate(t) / peak (the trace starts at midnight; peak at 14:00).
        diurnal = rate * (1 + DIURNAL_AMPLITUDE * math.sin(2 * math.pi * (t / DAY - 8 / 24)))
        if rng.random() > diurnal / peak:
            continue
        team = rng.choices(names, share)[0]
        size = rng.choices(sizes, weights)[0]
        size = min(size, _power_of_two_floor(quotas[team]))  # never more than its quota (the portal refuses that)
        cpus = float(size * rng.choice((4, 6, 8)))
        memory = size * rng.choice((32, 48, 64)) * GIB
        priority = 1 if rng.random() < high_priority_share else 0
        out.append(Job(len(out) + 1, round(t, 1), team, size, cpus, memory, _duration(rng, size), priority))
    first = out[0].submit
    out = [Job(j.id, round(j.submit - first, 1), j.project, j.gpus, j.cpus, j.memory, j.duration, j.priority)
           for j in out]  # fmt: skip
    return Trace(out, quotas)


def _power_of_two_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


COLUMNS = ("submit_time", "project", "gpus", "cpus", "memory", "duration", "priority")


def load_csv(path: str | Path, *, quotas: dict[str, int | None] | None = None) -> Trace:
    """A trace from a CSV file with a header row naming the columns `COLUMNS` (in any order; `priority` may be left
    out): submit time and duration in seconds, memory in bytes or with a unit ("64Gi"). Rows may come in any order;
    they are replayed by submit time. TraceError naming the line and column for anything else."""
    path = Path(path)
    jobs: list[Job] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header and c != "priority"]
        if missing:
            expected = ", ".join(COLUMNS)
            raise TraceError(f"{path.name}: line 1: missing column(s) {', '.join(missing)} (expected {expected})")
        for row in reader:
            line = reader.line_num
            jobs.append(_row(row, line, len(jobs) + 1, path.name))
    if not jobs:
        raise TraceError(f"{path.name}: no jobs")
    jobs.sort(key=lambda j: (j.submit, j.id))
    return Trace(jobs, dict(quotas or {}))


def _row(row: dict[str, str | None], line: int, job_id: int, name: str) -> Job:
    def fail(column: str, why: str) -> TraceError:
        return TraceError(f"{name}: line {line}: {column}: {why}")

    def number(column: str, *, whole: bool = False, minimum: float = 0.0, positive: bool = False) -> float:
        raw = (row.get(column) or "").strip()
        if not raw:
            raise fail(column, "empty")
        try:
            value = int(raw) if whole else float(raw)
        except ValueError:
            raise fail(column, f"not a {'whole ' if whole else ''}number: {raw!r}") from None
        if not math.isfinite(value) or value < minimum or (positive and value <= 0):
            raise fail(column, f"must be {'above' if positive else 'at least'} {minimum:g}, not {raw}")
        return value

    if None in row:  # more fields than the header names
        raise TraceError(f"{name}: line {line}: more fields than the header has")
    project = (row.get("project") or "").strip()
    if not project:
        raise fail("project", "empty")
    raw_memory = (row.get("memory") or "").strip()
    try:
        memory = parse_memory(raw_memory) or 0
    except ValueError:
        raise fail("memory", f"not a memory size: {raw_memory!r}") from None
    priority_raw = (row.get("priority") or "").strip()
    return Job(
        id=job_id,
        submit=number("submit_time"),
        project=project,
        gpus=int(number("gpus", whole=True)),
        cpus=number("cpus"),
        memory=int(memory),
        duration=number("duration", positive=True),
        priority=int(number("priority", whole=True, minimum=-(10**9))) if priority_raw else 0,
    )


def write_csv(trace: Trace, path: str | Path) -> None:
    """The trace as `load_csv` reads it."""
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for j in trace.jobs:
            writer.writerow([j.submit, j.project, j.gpus, j.cpus, j.memory, j.duration, j.priority])
