"""The local agent (`manage.py runagent`): claims workloads, runs them as process trees, streams their
output, samples their CPU and memory, enforces timeouts and cancellation, and reports every change.

One thread per workload supervises its replicas; two reader threads per replica stream stdout and
stderr. The main loop wakes on a UDP datagram from `LocalRuntime.submit/cancel` (or once a second)
and heartbeats, so the portal can tell a dead agent from a busy one. What this process submits itself
(the jobs listener advances runs on the notifier thread, apps/runtime/local/notifier.py) it takes at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO

from django.db import DatabaseError, connection
from django.utils import timezone

from apps.runtime import hooks, secretenv
from apps.runtime.base import send_wakeups
from apps.runtime.local import sandbox
from apps.runtime.local.gpu import GpuProbe, GpuSlots, attribute, visible_devices, with_devices
from apps.runtime.local.launch import ReplicaSpec, plan
from apps.runtime.local.notifier import End, Notice, Notifier, replace_broken_connection
from apps.runtime.local.processes import ExitWaiter, TreeSampler, detect_capacity, kill_tree
from apps.runtime.models import Agent, LocalWorkload, heartbeat_cutoff, progress_marker
from apps.runtime.workload import AGENT_SHUT_DOWN, Phase, Status, Workload
from portal.lib.resources import format_bytes

log = logging.getLogger("portal.agent")

HEARTBEAT_SECONDS = 2.0
SAMPLE_SECONDS = 1.0
PRIME_SECONDS = 0.1
KILL_GRACE_SECONDS = 5.0
READ_BYTES = 1 << 16  # a full pipe: smaller reads cost throughput (16 KiB: -10 %), larger add nothing
# What a task's pipe holds before its prints wait. A line waits behind as many others in the pipe, in the chunk read
# before it and in the chunk being stored: the default 64 KiB (about 2,000 lines) was 40 ms of print-to-browser
# latency per hop at 55k lines/s; 16 KiB still fills a batch of 1,000 lines in two reads.
PIPE_BYTES = 1 << 14
SET_PIPE_SIZE = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only; elsewhere the default pipe works
MAX_PIECE_BYTES = 1 << 16
# How often a replica with a memory limit has its tree's memory looked at (the watchdog that enforces the limit on
# this runtime, where no cgroup does): a burst between two looks is still caught at the end by wait4's peak.
MEMORY_WATCH_SECONDS = 0.2
OOM_EXIT_CODE = 137  # what a container killed by the OOM killer exits with (128 + SIGKILL), as Kubernetes reports


def oom_reason(replica: str, used: int, limit: int, several: bool) -> str:
    """The reason of a replica stopped over its memory limit, worded as Kubernetes words it ("OOMKilled")."""
    who = f"replica {replica}" if several else "the task"
    return f"OOMKilled: {who} used {format_bytes(used)}, over its memory limit of {format_bytes(limit)}"


@dataclass
class Ending:
    """How supervision ended: the state decided there (None: by the exit codes), its reason, an exit code that
    overrides the replicas' own (137 for a memory overrun), and what the replicas used."""

    state: str | None = None
    reason: str = ""
    exit_code: int | None = None
    cpu_seconds: float = 0.0
    peak_rss: int = 0


@dataclass
class Supervised:
    row_id: int
    workload: Workload
    cancel: threading.Event = field(default_factory=threading.Event)


class Supervisor:
    """Runs one workload to the end and records how it ended (on a thread of the agent's pool, whose
    database connection is reused from one workload to the next)."""

    def __init__(self, agent: LocalAgent, item: Supervised) -> None:
        self.agent = agent
        self.item = item
        self.lock = threading.Lock()
        self.network: sandbox.Network | sandbox.Lease | None = None
        self.gpus: list[int] = []  # the machine's GPUs its replicas hold (given back when it ends)

    def run(self) -> None:
        replace_broken_connection()
        try:
            self._run()
        except Exception:  # a crash here must still end the workload, never leave it running
            log.exception("supervising %s failed", self.item.workload.uid)
            self._finish(LocalWorkload.State.FAILED, None, "the agent failed while supervising this workload")
        finally:
            self._close_network()
            self.agent.gpus.give(self.gpus)
            self.gpus = []
            self.agent.forget(self.item)

    def _run(self) -> None:
        # The stored spec holds references where the env has project secrets and tokens: the processes are planned
        # from the resolved copy (memory only), and the sink masks what it resolved to.
        workload, secrets = secretenv.resolve(self.item.workload)
        self.sink = hooks.open_sink(self.item.workload, secrets)
        procs: list[tuple[ReplicaSpec, subprocess.Popen]] = []
        try:
            # Sandboxed (apps/runtime/local/sandbox.py): one network namespace for all the replicas, so that a
            # distributed workload's replicas meet on 127.0.0.1 as in a pod; SandboxRefused when it may not run here.
            if sandbox.admit(workload, socket.gethostname()):
                self.network = sandbox.open_network(workload)
            for spec in plan(workload):  # plan() raises OSError for a missing task environment
                os.makedirs(spec.cwd, exist_ok=True)
                if workload.resources.gpu > 0:  # NoFreeGpu (an OSError) when the machine has too few free
                    held = self.agent.gpus.take(workload.resources.gpu)
                    self.gpus.extend(held)
                    spec = ReplicaSpec(spec.name, spec.argv, with_devices(spec.env, held), spec.cwd)
                if self.network is not None:
                    argv, env = sandbox.wrap(spec.argv, spec.cwd, spec.env, workload, self.network)
                    spec = ReplicaSpec(spec.name, argv, env, spec.cwd)
                procs.append((spec, self._spawn(spec)))
        except OSError as exc:
            for _spec, proc in procs:
                kill_tree(proc.pid, signal.SIGKILL)
            self._close_network()
            self._finish(LocalWorkload.State.FAILED, None, f"could not start: {exc}")
            return
        started = timezone.now()
        with progress_marker():  # the end's (durable) commit follows; only the pids matter before it
            LocalWorkload.objects.filter(pk=self.item.row_id).update(
                state=LocalWorkload.State.RUNNING, started_at=started, pids={s.name: p.pid for s, p in procs}
            )
        self._changed(Phase.RUNNING)
        readers = [
            threading.Thread(target=self._pump, args=(spec.name, stream_name, stream), daemon=True)
            for spec, proc in procs
            for stream_name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr))
        ]
        for reader in readers:
            reader.start()

        exits = ExitWaiter([proc for _s, proc in procs])
        try:
            ending = self._supervise(workload, procs, exits)
        finally:
            exits.close()
        for reader in readers:
            reader.join(timeout=5)
        self._close_network()
        self._ended(workload, procs, started, ending)

    def _close_network(self) -> None:
        if self.network is not None:
            self.network.close()
            self.network = None

    def _supervise(
        self, workload: Workload, procs: list[tuple[ReplicaSpec, subprocess.Popen]], exits: ExitWaiter
    ) -> Ending:
        """Until the replicas exit, a timeout, a cancel or a replica over its memory limit: samples usage, stops
        what must stop, and says how it ended (state None: by the exit codes)."""
        deadline = time.monotonic() + workload.timeout if workload.timeout else None
        limit = workload.resources.memory_bytes  # per replica, as a pod's limit is per pod
        ending = Ending()
        samplers = [TreeSampler(proc.pid) for _s, proc in procs]
        peak_total = 0
        # The first sample only primes the CPU %, and finding a tree's processes scans /proc: done once the task
        # has lived PRIME_SECONDS, so a short task never pays for it. A memory limit is watched more often.
        next_sample = time.monotonic() + PRIME_SECONDS
        primed, next_memory = False, next_sample if limit else float("inf")
        over: tuple[ReplicaSpec, int] | None = None
        while any(exits.poll(proc) is None for _s, proc in procs):
            if self.item.cancel.is_set():
                # Said apart from a cancel someone asked for: what ran here was the user's to keep running.
                ending.state = LocalWorkload.State.CANCELLED
                ending.reason = AGENT_SHUT_DOWN if self.agent.stopping.is_set() else "cancelled"
                break
            if deadline is not None and time.monotonic() > deadline:
                ending.state = LocalWorkload.State.FAILED
                ending.reason = f"timeout: still running after {workload.timeout} s"
                break
            failed = next(((s, p) for s, p in procs if exits.poll(p) not in (None, 0)), None)
            if failed is not None and len(procs) > 1:
                # A distributed job fails as a whole when one replica fails (the operators' default).
                ending.state = LocalWorkload.State.FAILED
                ending.reason = f"replica {failed[0].name} exited with code {failed[1].returncode}"
                break
            now = time.monotonic()
            if now >= next_sample:
                rss = 0
                for sampler in samplers:
                    rss += sampler.sample(now)[1]
                peak_total = max(peak_total, rss)
                if primed:
                    self._sample(workload, procs, samplers, now)
                primed, next_sample = True, now + SAMPLE_SECONDS
            elif now >= next_memory:
                for sampler in samplers:
                    sampler.memory()
                peak_total = max(peak_total, sum(sampler.rss for sampler in samplers))
            if limit:
                next_memory = now + MEMORY_WATCH_SECONDS if now >= next_memory else next_memory
                charged = zip((spec for spec, _p in procs), (sampler.charged for sampler in samplers), strict=True)
                over = next(((spec, used) for spec, used in charged if used > limit), None)
                if over is not None:
                    ending.state, ending.exit_code = LocalWorkload.State.FAILED, OOM_EXIT_CODE
                    ending.reason = oom_reason(over[0].name, over[1], limit, len(procs) > 1)
                    break
            exits.wait(0.05)  # returns the moment a replica exits, rather than sleeping blindly

        if ending.state is not None:  # stop what is still running
            if over is None:  # a limit overrun is killed at once, as the kernel's OOM killer would
                for _s, proc in procs:
                    kill_tree(proc.pid, signal.SIGTERM)
                end = time.monotonic() + KILL_GRACE_SECONDS
                while time.monotonic() < end and any(exits.poll(p) is None for _s, p in procs):
                    time.sleep(0.05)
            for sampler in samplers:  # what the tree used up to now: its last reading bills a killed replica
                sampler.sample()
            for _s, proc in procs:
                kill_tree(proc.pid, signal.SIGKILL)
                exits.reap(proc)
        # Per replica, the larger of what wait4 reported (exact for it and what it waited for) and the last
        # sampled total of its tree (which also holds descendants that were killed, or never waited for).
        ending.cpu_seconds = sum(
            max(exits.cpu.get(proc.pid, 0.0), sampler.cpu_seconds)
            for (_s, proc), sampler in zip(procs, samplers, strict=True)
        )
        peaks = {spec.name: exits.peak.get(proc.pid, 0) for spec, proc in procs}
        ending.peak_rss = max(peak_total, *peaks.values(), *(sampler.peak_rss for sampler in samplers))
        if limit and ending.state is None:
            # It exited before the watchdog saw it over its limit (a burst between two looks): wait4's peak still
            # tells, and a limit is a limit (a pod would have been killed).
            name, peak = max(peaks.items(), key=lambda item: item[1])
            if peak > limit:
                ending.state = LocalWorkload.State.FAILED
                ending.reason = oom_reason(name, peak, limit, len(procs) > 1) + " (it ended before it could be stopped)"
        return ending

    def _sample(
        self,
        workload: Workload,
        procs: list[tuple[ReplicaSpec, subprocess.Popen]],
        samplers: list[TreeSampler],
        now: float,
    ) -> None:
        """Hand each replica's sample to the sink: its tree's CPU and memory, and its share of the GPUs."""
        reading = self.agent.gpu.read()
        requested = workload.resources.gpu
        with self.lock:
            for (spec, _p), sampler in zip(procs, samplers, strict=True):
                if not sampler.pids:  # it exited while others run: no process, no sample (not a fake 0)
                    continue
                gpu_percent, gpu_memory = attribute(reading, sampler.pids, visible_devices(spec.env), requested)
                self.sink.sample(
                    sampler.cpu_percent,
                    sampler.rss,
                    replica=spec.name,
                    gpu_percent=gpu_percent,
                    gpu_memory_bytes=gpu_memory,
                )

    def _ended(
        self,
        workload: Workload,
        procs: list[tuple[ReplicaSpec, subprocess.Popen]],
        started,
        ending: Ending,
    ) -> None:
        state, reason = ending.state, ending.reason
        exit_code = next((p.returncode for _s, p in procs if p.returncode != 0), 0)
        if ending.exit_code is not None:
            exit_code = ending.exit_code
        if state is None:
            bad = next(((s, p) for s, p in procs if p.returncode != 0), None)
            if bad is None:
                state = LocalWorkload.State.SUCCEEDED
            else:
                state = LocalWorkload.State.FAILED
                code = bad[1].returncode
                reason = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
                if len(procs) > 1:
                    reason = f"replica {bad[0].name} {reason}"
        elapsed = (timezone.now() - started).total_seconds()
        usage = {
            "cpu_seconds": round(ending.cpu_seconds, 3),
            "peak_rss_bytes": ending.peak_rss,
            "wall_seconds": round(elapsed, 3),
        }
        with self.lock:
            self.sink.close()
        self._finish(state, exit_code, reason, usage)

    def _spawn(self, spec: ReplicaSpec) -> subprocess.Popen:
        proc = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout or cancel kills the whole tree
        )
        if SET_PIPE_SIZE is not None:
            for pipe in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):  # a limit on pipe sizes: the default pipe works too
                    fcntl.fcntl(pipe.fileno(), SET_PIPE_SIZE, PIPE_BYTES)
        return proc

    def _pump(self, replica: str, stream_name: str, stream: IO[bytes]) -> None:
        """Read what the replica printed in chunks (whatever the pipe holds, up to READ_BYTES) and hand the
        complete lines of each chunk to the sink at once: per-line reads and calls cost more than storing.
        A line longer than 64 KiB is cut into pieces, so one endless line cannot grow the agent's memory."""
        fd = stream.fileno()
        tail = b""
        while chunk := os.read(fd, READ_BYTES):
            *lines, tail = (tail + chunk).split(b"\n")
            while len(tail) > MAX_PIECE_BYTES:
                lines.append(tail[:MAX_PIECE_BYTES])
                tail = tail[MAX_PIECE_BYTES:]
            if lines:
                texts = [line.decode("utf-8", errors="replace").rstrip("\r") for line in lines]
                with self.lock:
                    self.sink.write_many(replica, stream_name, texts)
        if tail:
            with self.lock:
                self.sink.write_many(replica, stream_name, [tail.decode("utf-8", errors="replace").rstrip("\r")])
        stream.close()

    def _finish(self, state: str, exit_code: int | None, reason: str, usage: dict | None = None) -> None:
        """Hand the end to the notifier, which records it in the same transaction as what its listener makes of
        it (one commit per task's end, not two in a row)."""
        reason, usage = reason[:2000], usage or {}
        end = End(self.item.row_id, state, exit_code, reason, usage, finished_at=timezone.now())
        status = Status(Phase(state), exit_code=exit_code, reason=reason, usage=usage)
        self.agent.notify(Notice(self.item.workload, Phase(state), status, end))

    def _changed(self, phase: Phase) -> None:
        self.agent.notify(Notice(self.item.workload, phase))


class LocalAgent:
    """The supervisor of all local workloads on this machine."""

    def __init__(self, max_workloads: int = 64) -> None:
        self.max_workloads = max_workloads
        self.running: dict[int, Supervised] = {}
        self.pool = ThreadPoolExecutor(max_workers=max_workloads, thread_name_prefix="supervise")
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.full = False  # the last claim took as many as there was room for: more may be pending
        # Ends are recorded and listeners hear of changes on one thread, in order (apps/runtime/local/notifier.py).
        self.notifier = Notifier()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.capacity = detect_capacity()
        self.gpu = GpuProbe(enabled=bool(self.capacity["gpus"]))  # one nvidia-smi reading a second, for all tasks
        self.gpus = GpuSlots(g["index"] for g in self.capacity["gpus"])
        sandbox.warn_at_start()  # loud when workloads will not be isolated (docs/security.md)
        self.agent = Agent.objects.create(
            hostname=socket.gethostname(),
            pid=os.getpid(),
            address="{}:{}".format(*self.sock.getsockname()),
            capacity=self.capacity,
        )

    def notify(self, notice: Notice) -> None:
        self.notifier.put(notice)

    def forget(self, item: Supervised) -> None:
        with self.lock:
            self.running.pop(item.row_id, None)
            full, self.full = self.full, False
        if full:  # the last claim left work behind for want of room: look again now, not at the next tick
            send_wakeups([self.agent.address])

    def room(self) -> int:
        """How many more workloads it takes now (none once it is stopping)."""
        if self.stopping.is_set():
            return 0
        with self.lock:
            return self.max_workloads - len(self.running)

    def run_forever(self) -> None:
        global _here
        log.info("agent %s listening on %s with %s", self.agent.pk, self.agent.address, self.capacity)
        self.adopt_orphans()
        _here = self
        try:
            self._loop()
        finally:
            _here = None
            self.shutdown()

    def _loop(self) -> None:
        last_beat = 0.0
        while not self.stopping.is_set():
            readable, _w, _x = select.select([self.sock], [], [], 1.0)
            if readable:
                while True:  # drain every pending wake-up
                    try:
                        self.sock.recv(64, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
            try:
                self.claim()
                self.check_cancellations()
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                    Agent.objects.filter(pk=self.agent.pk).update(heartbeat_at=timezone.now(), capacity=self.capacity)
                    last_beat = time.monotonic()
            except DatabaseError:
                # The database went away (restart, failover): drop the connection and try again shortly.
                log.exception("database error in the agent loop")
                connection.close()
                time.sleep(1)

    def adopt_orphans(self) -> None:
        """Workloads of dead agents on this host: their processes are killed and they are marked lost."""
        hostname = socket.gethostname()
        orphans = LocalWorkload.objects.filter(
            state__in=[LocalWorkload.State.PENDING, LocalWorkload.State.RUNNING],
            agent__hostname=hostname,
            agent__heartbeat_at__lt=heartbeat_cutoff(),
        ).exclude(agent=self.agent)
        for row in orphans:
            mark_lost(row)

    def claim(self) -> None:
        room = self.room()
        if room <= 0:
            with self.lock:
                self.full = True
            return
        claimed = claim_pending(self.agent.pk, room)
        if len(claimed) == room:
            with self.lock:
                self.full = True
        self._supervise(claimed)

    def take(self, uids: list[str]) -> None:
        """Run workloads that `LocalRuntime.submit_many`, in this process, wrote as claimed by this agent (after
        their commit): no wake-up datagram, and no claiming statement with a commit of its own, per task. Once it
        is stopping it lets them go instead, for any agent to claim."""
        if self.stopping.is_set():
            LocalWorkload.objects.filter(uid__in=uids, agent=self.agent, state=LocalWorkload.State.PENDING).update(
                agent=None
            )
            return
        self._supervise(taken_rows(self.agent.pk, uids))

    def _supervise(self, rows: list[tuple[int, dict]]) -> None:
        for row_id, spec in rows:
            item = Supervised(row_id, Workload.from_dict(spec))
            with self.lock:
                if row_id in self.running:
                    continue
                self.running[row_id] = item
            self.pool.submit(Supervisor(self, item).run)

    def check_cancellations(self) -> None:
        with self.lock:
            ids = list(self.running)
        if not ids:
            return
        for pk in LocalWorkload.objects.filter(pk__in=ids, cancel_requested=True).values_list("pk", flat=True):
            with self.lock:
                item = self.running.get(pk)
            if item is not None:
                item.cancel.set()

    def shutdown(self) -> None:
        """Stop accepting work; cancel what runs (its state is recorded), then say goodbye."""
        with self.lock:
            items = list(self.running.values())
        for item in items:
            item.cancel.set()
        deadline = time.monotonic() + KILL_GRACE_SECONDS + 5
        while time.monotonic() < deadline:
            with self.lock:
                if not self.running:
                    break
            time.sleep(0.1)
        self.notifier.stop(timeout=10)  # record and deliver what the stopped workloads reported
        Agent.objects.filter(pk=self.agent.pk).update(stopped_at=timezone.now())
        self.pool.shutdown(wait=False)
        self.gpu.close()
        self.sock.close()


_here: LocalAgent | None = None  # the agent whose loop runs in this process (runagent; the demo's thread)


def running_here() -> LocalAgent | None:
    """The agent running in this process, if any: what this process submits, it can take at once."""
    return _here


def taken_rows(agent_id: int, uids: list[str]) -> list[tuple[int, dict]]:
    """(id, spec) of the workloads among `uids` written as claimed by `agent_id` and not started yet (a uid
    submitted before keeps its first row, which is not necessarily this agent's)."""
    rows = LocalWorkload.objects.filter(agent_id=agent_id, state=LocalWorkload.State.PENDING, uid__in=uids)
    return list(rows.order_by("id").values_list("id", "spec"))


def claim_pending(agent_id: int, limit: int) -> list[tuple[int, dict]]:
    """Take up to `limit` unclaimed workloads, oldest first, in one statement: (id, spec) of each taken.
    Agents racing for the same rows each get different ones (SKIP LOCKED; SQLite serialises writers)."""
    table = LocalWorkload._meta.db_table
    skip_locked = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    sql = (
        f"UPDATE {table} SET agent_id = %s WHERE agent_id IS NULL AND id IN ("
        f"SELECT id FROM {table} WHERE state = %s AND agent_id IS NULL ORDER BY created_at, id LIMIT %s{skip_locked}"
        ") RETURNING id, spec"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [agent_id, LocalWorkload.State.PENDING, limit])
        rows = cursor.fetchall()
    claimed = [(row_id, json.loads(spec) if isinstance(spec, str | bytes) else spec) for row_id, spec in rows]
    return sorted(claimed)  # RETURNING gives no order


def mark_lost(row: LocalWorkload, reason: str = "agent lost") -> bool:
    """Record that a workload's agent died; kill what is left of it when it ran on this host."""
    if row.agent is not None and row.agent.hostname == socket.gethostname():
        for pid in (row.pids or {}).values():
            kill_tree(int(pid), signal.SIGKILL)
    changed = LocalWorkload.objects.filter(
        pk=row.pk, state__in=[LocalWorkload.State.PENDING, LocalWorkload.State.RUNNING]
    ).update(state=LocalWorkload.State.LOST, reason=reason, finished_at=timezone.now())
    return bool(changed)
