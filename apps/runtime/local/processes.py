"""The processes of local workloads: this machine's capacity, a process tree's usage and how it is stopped, and
noticing the moment a process exits (used by the agent, apps/runtime/local/agent.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import subprocess

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


def tree_usage(pid: int) -> tuple[float, int]:
    """(CPU %, RSS bytes) of a process and its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0
    cpu, rss = 0.0, 0
    for proc in procs:
        try:
            with proc.oneshot():
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def exited_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of an exited, not yet reaped process and of the descendants it reaped, from
    /proc/<pid>/stat (a zombie keeps it until its parent waits for it); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # fields after the command: state is [0], so utime, stime, cutime, cstime are [11:15]
        return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS
    except (ValueError, IndexError):
        return None


class ExitWaiter:
    """Wakes the moment one of a workload's processes exits, through their pidfds (Linux ≥ 5.3).

    `Popen.wait(timeout)` polls with sleeps that double from 0.5 ms, so a process that lives 2 ms is noticed
    up to 2 ms late; a chain of short tasks paid that at every node. Opened right after the spawn, before
    anything reaps the process, so a pidfd can never name a reused pid.

    When it wakes for an exit it also reads the exited process's CPU time before anything reaps it (`cpu`, by
    pid): exact for the whole life of the process and what it waited for, where sampling once a second misses
    a short task altogether.
    """

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.procs = procs
        self.poller: select.poll | None = None
        self.fds: list[int] = []
        self.reaped: set[int] = set()
        self.cpu: dict[int, float] = {}
        try:
            self.fds = [os.pidfd_open(proc.pid) for proc in procs]
        except (AttributeError, OSError):  # not Linux, or an old kernel: Popen.wait below
            self.close()
            return
        self.poller = select.poll()
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> None:
        """Return when a running process exits or after `timeout` seconds."""
        if self.poller is not None:
            for proc, fd in zip(self.procs, self.fds, strict=True):
                if proc.returncode is not None and fd not in self.reaped:  # its pidfd stays readable: drop it
                    self.poller.unregister(fd)
                    self.reaped.add(fd)
            if len(self.reaped) < len(self.fds):
                for fd, _event in self.poller.poll(timeout * 1000):
                    pid = self.procs[self.fds.index(fd)].pid
                    if pid not in self.cpu and (seconds := exited_cpu_seconds(pid)) is not None:
                        self.cpu[pid] = seconds
            return
        running = next((p for p in self.procs if p.poll() is None), None)
        if running is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(timeout=timeout)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
