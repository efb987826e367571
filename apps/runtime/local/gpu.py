"""GPU utilisation and memory of local workloads, through `nvidia-smi` (used by the agent, apps/runtime/local/agent.py).

Two queries make one reading of the machine: each GPU's utilisation (`--query-gpu`) and each compute process on it
with the memory it holds (`--query-compute-apps`). A replica is then credited with the GPU memory of the processes of
its tree, and with the mean utilisation of the GPUs it is on (those its processes use, else those its
`CUDA_VISIBLE_DEVICES` names, else — a replica that asked for GPUs and touches none — 0 %, which is what the
low-utilisation warning is for). A workload that asked for no GPU on a machine without one reads None: nothing to show,
not an error.

One reading serves every replica (`GpuProbe` is shared by the agent's supervisors and reads on a thread of its own),
so the cost is two short `nvidia-smi` runs a second per machine while tasks run, whatever their number; a machine
without GPUs pays nothing. Utilisation is the driver's "percent of time over the past sample period during which one or
more kernels was executing", the same number `nvidia-smi` and NVML report.
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("portal.agent")

MiB = 2**20
MAX_AGE = 0.9  # seconds: one reading per sampling tick, shared by the replicas sampled in it
TIMEOUT = 5.0
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,utilization.gpu", "--format=csv,noheader,nounits"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class GpuReading:
    """One look at the machine's GPUs: utilisation by index, and each compute process's [(GPU index, bytes)]."""

    utilisation: dict[int, float] = field(default_factory=dict)
    processes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def _number(text: str) -> float | None:
    """A field of nvidia-smi's CSV: "[N/A]", "[Not Supported]" or empty read as unknown."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_gpus(text: str) -> tuple[dict[int, float], dict[str, int]]:
    """`--query-gpu=index,uuid,utilization.gpu` → ({index: percent}, {uuid: index}); unknown utilisation is 0."""
    utilisation: dict[int, float] = {}
    uuids: dict[str, int] = {}
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        index = int(parts[0])
        uuids[parts[1]] = index
        utilisation[index] = _number(parts[2]) or 0.0
    return utilisation, uuids


def parse_apps(text: str, uuids: Mapping[str, int]) -> dict[int, list[tuple[int, int]]]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory` (MiB) → {pid: [(GPU index, bytes)]}; a process on several GPUs
    has a line per GPU. Lines of GPUs not in `uuids` (one that fell off the bus between the queries) are left out."""
    processes: dict[int, list[tuple[int, int]]] = {}
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in uuids:
            continue
        memory = _number(parts[2])
        processes.setdefault(int(parts[0]), []).append((uuids[parts[1]], int((memory or 0) * MiB)))
    return processes


def visible_devices(env: Mapping[str, str]) -> list[int] | None:
    """The GPU indices a replica's `CUDA_VISIBLE_DEVICES` names (None: not set, or names GPUs by UUID)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    parts = [part.strip() for part in value.split(",") if part.strip()]
    return [int(part) for part in parts] if all(part.isdigit() for part in parts) else None


def attribute(
    reading: GpuReading | None, pids: Iterable[int], visible: list[int] | None, requested: float
) -> tuple[float | None, int | None]:
    """(utilisation %, memory bytes) of one replica whose process tree is `pids`.

    Memory: what its processes hold, on any GPU. Utilisation: the mean over the GPUs it is on (see the module's
    docstring). None for both when the machine has no GPU, or when the replica asked for none and uses none.
    """
    if reading is None or not reading.utilisation:
        return None, None
    on: set[int] = set()
    memory = 0
    for pid in pids:
        for index, used in reading.processes.get(pid, ()):
            on.add(index)
            memory += used
    if not on:
        if requested <= 0:
            return None, None
        on = {i for i in (visible or []) if i in reading.utilisation}
        if not on:
            return 0.0, 0
    percents = [reading.utilisation[i] for i in sorted(on) if i in reading.utilisation]
    return (round(sum(percents) / len(percents), 1) if percents else 0.0), memory


class GpuProbe:
    """The machine's GPUs as last read by a thread of its own, which runs `nvidia-smi` once per `MAX_AGE` while
    samples are asked for (and sleeps after `IDLE_AFTER` seconds without one).

    `read` never waits for `nvidia-smi`: a driver that hangs (up to `TIMEOUT`) must not stall the supervisors'
    loops, which also watch memory limits, timeouts and cancels. A reading older than `STALE_AFTER` is not used.
    """

    IDLE_AFTER = 5.0
    STALE_AFTER = 10.0

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = shutil.which("nvidia-smi") is not None if enabled is None else enabled
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._reading: GpuReading | None = None
        self._at = float("-inf")
        self._wanted = float("-inf")
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failures = 0

    def close(self) -> None:
        """Stop the reading thread (the agent's end; tests)."""
        self._closed = True
        self._wake.set()

    def read(self) -> GpuReading | None:
        """The latest reading (None: no GPU, none yet, or too old)."""
        if not self.enabled:
            return None
        now = time.monotonic()
        with self._lock:
            self._wanted = now
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpu-probe", daemon=True)
                self._thread.start()
            reading, at = self._reading, self._at
        self._wake.set()
        return reading if now - at <= self.STALE_AFTER else None

    def _run(self) -> None:
        while not self._closed:
            if time.monotonic() - self._wanted > self.IDLE_AFTER:
                self._wake.clear()
                self._wake.wait()
                continue
            self.refresh()
            time.sleep(MAX_AGE)

    def refresh(self) -> GpuReading | None:
        """Read the GPUs now (on the probe's thread; tests call it directly)."""
        reading = self._query()
        with self._lock:
            self._reading, self._at = reading, time.monotonic()
        return reading

    def _query(self) -> GpuReading | None:
        try:
            gpus = subprocess.run(GPU_QUERY, capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
            apps = subprocess.run(APPS_QUERY, capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
        except (subprocess.SubprocessError, OSError) as exc:
            self._failures += 1
            if self._failures == 1 or self._failures % 600 == 0:  # once, then every ten minutes of failing
                log.warning("nvidia-smi failed, GPU samples are empty: %s", exc)
            return None
        utilisation, uuids = parse_gpus(gpus)
        return GpuReading(utilisation, parse_apps(apps, uuids))


class NoFreeGpu(OSError):
    """A replica asks for more GPUs than this machine has free (an OSError: the workload fails to start with it)."""

    def __init__(self, wanted: int, free: int, total: int) -> None:
        super().__init__(f"needs {wanted} GPU(s) per replica; {free} of this machine's {total} are free")


class GpuSlots:
    """Which of this machine's GPUs running replicas hold. A replica that asks for N GPUs is given N that no other
    running replica holds, named in its `CUDA_VISIBLE_DEVICES` (and `NVIDIA_VISIBLE_DEVICES`, for containers), and
    they come back when its workload ends: two one-GPU tasks of two projects never share the first GPU. A fraction
    of a GPU holds a whole one (the local runtime cannot share a device between processes)."""

    def __init__(self, indices: Iterable[int]) -> None:
        self.free = set(indices)
        self.total = len(self.free)
        self.lock = threading.Lock()

    def take(self, wanted: float) -> list[int]:
        count = math.ceil(wanted)
        with self.lock:
            if count > len(self.free):
                raise NoFreeGpu(count, len(self.free), self.total)
            chosen = sorted(self.free)[:count]
            self.free.difference_update(chosen)
        return chosen

    def give(self, indices: Iterable[int]) -> None:
        with self.lock:
            self.free.update(indices)


def with_devices(env: Mapping[str, str], indices: list[int]) -> dict[str, str]:
    """A replica's env naming exactly the GPUs it holds (whatever the workload's own env said)."""
    names = ",".join(str(i) for i in indices)
    return {**env, "CUDA_VISIBLE_DEVICES": names, "NVIDIA_VISIBLE_DEVICES": names}
