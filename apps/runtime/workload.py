"""The neutral description of work that every runtime understands, and what a runtime reports back."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

_MEMORY_UNITS = {
    "": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}  # fmt: skip
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$", re.IGNORECASE)


def parse_memory(value: Any) -> int | None:
    """Bytes from 1073741824, "1Gi", "2G", "512Mi", "512mb"; None for empty. ValueError otherwise."""
    if value in (None, "", 0):
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a memory size: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    match = _MEMORY_RE.match(str(value))
    if not match:
        raise ValueError(f"not a memory size: {value!r} (use e.g. 512Mi, 2Gi or a number of bytes)")
    number, unit = match.groups()
    return int(float(number) * _MEMORY_UNITS[(unit or "").lower()])


@dataclass(frozen=True)
class Resources:
    cpu: float = 1.0
    memory_bytes: int | None = None
    gpu: float = 0.0
    gpu_type: str = ""

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> Resources:
        """From {"cpu": 2, "memory": "4Gi", "gpu": 1, "gpu_type": "A100"}; ValueError names the bad field."""
        raw = raw or {}
        unknown = set(raw) - {"cpu", "memory", "gpu", "gpu_type"}
        if unknown:
            raise ValueError(f"unknown resource {sorted(unknown)[0]!r} (use cpu, memory, gpu, gpu_type)")
        try:
            cpu = float(raw.get("cpu", 1) or 0)
        except (TypeError, ValueError):
            raise ValueError(f"cpu: not a number: {raw.get('cpu')!r}") from None
        try:
            gpu = float(raw.get("gpu", 0) or 0)
        except (TypeError, ValueError):
            raise ValueError(f"gpu: not a number: {raw.get('gpu')!r}") from None
        if cpu < 0 or gpu < 0:
            raise ValueError("cpu and gpu cannot be negative")
        try:
            memory = parse_memory(raw.get("memory"))
        except ValueError as exc:
            raise ValueError(f"memory: {exc}") from None
        return cls(cpu=cpu, memory_bytes=memory, gpu=gpu, gpu_type=str(raw.get("gpu_type", "")))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Phase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    @property
    def finished(self) -> bool:
        return self not in (Phase.PENDING, Phase.RUNNING)


@dataclass
class Workload:
    """What to run. `uid` makes submission idempotent; the same workload becomes a process tree locally or
    a Job / PyTorchJob / … on Kubernetes."""

    uid: str
    name: str
    project: str
    command: list[str]
    kind: str = "job"
    framework: str = ""
    image: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    replicas: dict[str, int] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    timeout: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["resources"] = self.resources.as_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        data = dict(data)
        data["resources"] = Resources(**data.get("resources", {}))
        return cls(**data)


@dataclass
class Status:
    phase: Phase
    exit_code: int | None = None
    reason: str = ""
    replicas: dict[str, str] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)  # cpu_seconds, peak_rss_bytes, wall_seconds


@dataclass(frozen=True)
class Capacity:
    """What the runtime can still take: free now, and the total it has."""

    cpu: float
    memory_bytes: int
    gpu: float
    total_cpu: float
    total_memory_bytes: int
    total_gpu: float
