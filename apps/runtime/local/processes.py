"""The processes of local workloads: this machine's capacity, a process tree's usage and how it is stopped, and
noticing the moment a process exits (used by the agent, apps/runtime/local/agent.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import select
import shutil
import subprocess
import sys
import threading
import time

import psutil
from django.conf import settings

log = logging.getLogger("portal.agent")


def detect_capacity() -> dict:
    """Cores, memory and GPUs of this machine (GPUs through nvidia-smi when it is installed)."""
    gpus: list[dict] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            for line in out.strip().splitlines():
                index, name, memory = (part.strip() for part in line.split(","))
                gpus.append({"index": int(index), "name": name, "memory_bytes": int(float(memory)) * 2**20})
        except (subprocess.SubprocessError, ValueError, OSError) as exc:
            log.warning("nvidia-smi failed, assuming no GPUs: %s", exc)
    cpu = max((os.cpu_count() or 1) - settings.PORTAL_AGENT_RESERVED_CPU, 0.5)
    return {"cpu": cpu, "memory_bytes": psutil.virtual_memory().total, "gpu": len(gpus), "gpus": gpus}


def kill_tree(pid: int, sig: int) -> None:
    """Signal a replica's whole process group, and any descendant that left it."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.send_signal(sig)


class ProcessTable:
    """The parent of every process on this machine, read from /proc at most once per `max_age` seconds by whichever
    sampler asks first (thread-safe; one table serves all the agent's supervisors).

    Finding a tree's descendants means reading every process's parent: `psutil.Process.children(recursive=True)` does
    it once per call (~2 ms with 150 processes on the machine), so each replica's sample and each look of the memory
    watchdog (five a second) paid a full scan. Shared, the scan is paid once per tick for every replica of every
    task. A child younger than `max_age` may be missed by one look, as one born between two looks always was.
    """

    def __init__(self, max_age: float = 0.15) -> None:
        self.max_age = max_age
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._children: dict[int, list[int]] = {}

    def descendants(self, pid: int) -> list[int]:
        """The pids below `pid` (children first, then theirs)."""
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.max_age:
                self._children, self._at = self._read(), now
            children = self._children
        found, queue = [], [pid]
        while queue:
            below = children.get(queue.pop(), ())
            found.extend(below)
            queue.extend(below)
        return found

    @staticmethod
    def _read() -> dict[int, list[int]]:
        children: dict[int, list[int]] = {}
        if not sys.platform.startswith("linux"):
            for proc in psutil.process_iter(["ppid"]):
                children.setdefault(proc.info["ppid"] or 0, []).append(proc.pid)
            return children
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    data = stat.read()
            except OSError:  # it exited while the folder was read
                continue
            # "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ")".
            fields = data[data.rfind(b")") + 2 :].split(b" ", 2)
            if len(fields) > 1:
                children.setdefault(int(fields[1]), []).append(int(name))
        return children


PROCESS_TABLE = ProcessTable()


def _cumulative_cpu(proc: psutil.Process) -> float:
    """CPU seconds of a process and of the children it has reaped (theirs are added to its own when it waits)."""
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


class TreeSampler:
    """CPU and memory of one replica's process tree, sampled again and again.

    CPU % comes from the growth of the tree's cumulative CPU time between two samples: a fresh `psutil.Process`
    per sample (what this replaced) has no previous reading, so its `cpu_percent` was always 0. The cumulative
    time counts every live process of the tree plus what each has reaped, so a child that ran and was waited
    for between two samples is counted too; it only grows (a descendant that leaves the tree takes its time
    along, which must not read as negative use). The root's `psutil.Process` is kept: it checks the creation
    time, so a reused pid is never mistaken for the replica.

    Memory: `rss` is the sum of the tree's resident sets (what the samples show). What counts against a memory
    limit (`charged`) is that for a lone process, and the sum of proportional sets (PSS) for several: forked
    workers share their parent's pages, which a sum of RSS would count once per worker (a cgroup charges a page
    once), killing a tree of data-loader workers that is well within its limit.
    """

    def __init__(self, pid: int, table: ProcessTable = PROCESS_TABLE) -> None:
        try:
            self.root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self.root = None
        self.table = table
        self._procs: dict[int, psutil.Process] = {}  # the descendants seen last time (psutil objects are reused)
        self.cpu_seconds = 0.0  # the last sampled cumulative CPU time of the tree (what a killed replica is billed)
        self.cpu_percent = 0.0
        self.rss = 0
        self.charged = 0
        self.peak_rss = 0
        self.pids: list[int] = []  # the tree's live processes at the last sample (whose GPU memory is the replica's)
        self._at: float | None = None

    def _tree(self) -> list[psutil.Process]:
        if self.root is None:
            return []
        try:
            if not self.root.is_running():
                return []
        except psutil.Error:
            return []
        procs: dict[int, psutil.Process] = {}
        for pid in self.table.descendants(self.root.pid):
            proc = self._procs.get(pid)
            if proc is None:
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:  # gone since the table was read
                    continue
            procs[pid] = proc
        self._procs = procs
        return [self.root, *procs.values()]

    def _memory(self, procs: list[psutil.Process], rss: int) -> None:
        charged = rss
        if len(procs) > 1:
            charged = 0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    charged += proc.memory_full_info().pss  # smaps_rollup: one read per process
        self.rss, self.charged = rss, charged
        self.peak_rss = max(self.peak_rss, rss)

    def sample(self, now: float | None = None) -> tuple[float, int]:
        """(CPU % since the previous sample, RSS bytes of the tree now); the first sample primes the CPU %."""
        now = time.monotonic() if now is None else now
        procs = self._tree()
        cpu, rss = 0.0, 0
        read: list[int] = []
        for proc in procs:
            try:
                with proc.oneshot():
                    cpu += _cumulative_cpu(proc)
                    if proc.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: its time, nothing resident
                        continue
                    rss += proc.memory_info().rss
                read.append(proc.pid)
            except psutil.Error:  # it exited between listing and reading: its parent reaps its time
                continue
        self.pids = read
        if procs:
            if self._at is not None and now > self._at:
                self.cpu_percent = max(cpu - self.cpu_seconds, 0.0) / (now - self._at) * 100
            self.cpu_seconds = max(self.cpu_seconds, cpu)
            self._memory(procs, rss)
            self._at = now
        else:
            self.cpu_percent, self.rss, self.charged = 0.0, 0, 0
        return self.cpu_percent, self.rss

    def memory(self) -> int:
        """What the tree holds against a memory limit now, without touching the CPU reading (the watchdog's look
        between two samples)."""
        procs = self._tree()
        rss = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
        self._memory(procs, rss)
        return self.charged


def _own_peak_rss() -> int:
    """The peak resident set of this process's own memory (VmHWM), in bytes: what a process it spawns starts its
    wait4 peak at. Not getrusage's ru_maxrss, which also holds the peak this process inherited when it was started
    (a parent that once held 500 MiB gives its child a ru_maxrss of 500 MiB for life, though the child's own
    memory never held more than 22): an agent started by a big process took every replica below that for
    inherited and lost the peak of a short burst over its limit."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # elsewhere: an upper bound of the same
    return peak * (1 if sys.platform == "darwin" else 1024)


class ExitWaiter:
    """Wakes the moment one of a workload's processes exits, through their pidfds (Linux ≥ 5.3), and reaps the
    replicas itself with wait4, which tells what each used.

    `Popen.wait(timeout)` polls with sleeps that double from 0.5 ms, so a process that lives 2 ms is noticed
    up to 2 ms late; a chain of short tasks paid that at every node. Opened right after the spawn, before
    anything reaps the process, so a pidfd can never name a reused pid.

    Every replica is reaped here (`poll`, `reap`), never by `Popen.poll`: wait4's resource usage is exact for the
    whole life of the process and of the descendants it waited for — CPU seconds (`cpu`, by pid) and the peak
    resident memory of the largest of them (`peak`, bytes; 0 when no more than `inherited`) — where sampling once a
    second misses a short task altogether, and it holds for a replica that was killed as well as for one that exited.
    """

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.procs = procs
        self.poller: select.poll | None = None
        self.fds: list[int] = []
        self.reaped: set[int] = set()
        self.cpu: dict[int, float] = {}
        self.peak: dict[int, int] = {}
        # Linux keeps a process's peak RSS across execve, so a replica's wait4 peak starts at the peak of this
        # process's memory when it was started (measured: a /bin/true spawned by a process that once held 511 MiB
        # reports 511 MiB). A peak up to that says nothing about the replica: the sampled peaks stand in for it.
        self.inherited = _own_peak_rss()
        try:
            self.fds = [os.pidfd_open(proc.pid) for proc in procs]
        except (AttributeError, OSError):  # not Linux, or an old kernel: Popen.wait below
            self.close()
            return
        self.poller = select.poll()
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)

    def poll(self, proc: subprocess.Popen) -> int | None:
        """The replica's exit code once it has exited (reaping it), else None."""
        return self._reap(proc, os.WNOHANG)

    def reap(self, proc: subprocess.Popen) -> int:
        """Wait for the replica to exit (it was killed) and reap it."""
        code = self._reap(proc, 0)
        return proc.wait() if code is None else code

    def _reap(self, proc: subprocess.Popen, options: int) -> int | None:
        if proc.returncode is not None:
            return proc.returncode
        try:
            pid, status, usage = os.wait4(proc.pid, options)
        except ChildProcessError:  # reaped elsewhere: Popen knows its code, not what it used
            return proc.poll()
        if pid == 0:
            return None
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu[proc.pid] = usage.ru_utime + usage.ru_stime
        peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # KiB on Linux
        self.peak[proc.pid] = peak if peak > self.inherited else 0
        return proc.returncode

    def wait(self, timeout: float) -> None:
        """Return when a running process exits or after `timeout` seconds."""
        if self.poller is not None:
            for proc, fd in zip(self.procs, self.fds, strict=True):
                if proc.returncode is not None and fd not in self.reaped:  # its pidfd stays readable: drop it
                    self.poller.unregister(fd)
                    self.reaped.add(fd)
            if len(self.reaped) < len(self.fds):
                for fd, _event in self.poller.poll(timeout * 1000):
                    self.poll(self.procs[self.fds.index(fd)])
            return
        running = next((p for p in self.procs if self.poll(p) is None), None)
        if running is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(timeout=timeout)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
