"""CPU, memory and GPUs: the one value every app uses for what work asks for, what a quota allows, what a project
holds and what a runtime has free.

`Resources` is read from what people write (`Resources.parse`: 2, "500m", "2Gi", "512Mi"), from what is stored
(`Resources.from_json`, which reads every shape stored so far: a workload's and a revision's `memory_bytes`, a
pipeline node's and a task's `memory`), written back as one shape (`to_json`), turned into a Kubernetes container's
requests and limits (`kubernetes`), added, subtracted, multiplied by replicas and compared (`exceeded_by`), and
shown to people by one formatter (`describe`).

In limits (a quota, a capacity) an amount may be `UNLIMITED`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

AMOUNTS = ("cpu", "memory", "gpu")  # the amounts that add up, by the names people and specs use
UNLIMITED = math.inf

_MEMORY_UNITS = {
    "": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}  # fmt: skip
# The most a replica may ask for: far past any machine, and small enough for every column, quantity and allocator
# (a CPU of "NaN" or 1e308, or memory past 64 bits, reached the runtime and failed there).
MAX_AMOUNT = 1_000_000.0
MAX_MEMORY = 2**60
# Memory as the portal has always read it: "512Mi", "2G", "512mb" (case-insensitive; "m" is mega, as people mean
# it for memory). Anything else goes to Kubernetes' own quantity parser ("1e9", "1.5Gi", "128974848000m").
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$", re.IGNORECASE)
_EPSILON = 1e-9  # amounts are floats: 0.1 + 0.2 must still fit in 0.3


def parse_memory(value: Any) -> int | None:
    """Bytes from 1073741824, "1Gi", "2G", "512Mi", "512mb", "1e9"; None for empty. ValueError otherwise."""
    if value in (None, "", 0):
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a memory size: {value!r}")
    if isinstance(value, int):
        size: float = value  # exact: a float holds only 53 bits
    elif isinstance(value, float | Decimal):
        size = float(value)
    else:
        match = _MEMORY_RE.match(str(value))
        if match:
            number, unit = match.groups()
            size = float(number) * _MEMORY_UNITS[(unit or "").lower()]
        else:
            try:
                size = float(_parse_quantity(str(value).strip()))  # a float: "NaN" fails the bound below
            except (ValueError, InvalidOperation):
                raise ValueError(f"not a memory size: {value!r} (use e.g. 512Mi, 2Gi or a number of bytes)") from None
    if not 0 <= size <= MAX_MEMORY:  # NaN too: a bound no column, quantity or allocator takes
        raise ValueError(f"not a memory size: {value!r} (at most {MAX_MEMORY} bytes)")
    return int(size)


def _parse_quantity(text: str) -> Decimal:
    """Kubernetes' quantity parser, imported on first use: importing the kubernetes package takes 1-3 s, and every
    process that sets Django up (each test process, agent and worker) imports this module."""
    from kubernetes.utils import parse_quantity

    return parse_quantity(text)


def format_memory(size: int) -> str:
    """What `parse_memory` reads back: 2147483648 → "2Gi", 536870912 → "512Mi", other sizes in bytes."""
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def read_amount(value: Any) -> Decimal:
    """The number in 2, 0.5, "2", " 0.5 ", "500m" (a Kubernetes quantity), exactly and unbounded (NaN and the
    infinities are numbers here: the caller bounds them); ValueError when it is none. `parse_amount` bounds it for
    specs; forms bound it to their columns."""
    if value is None or isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, Decimal):
        return value
    text = str(value).strip()
    try:
        return Decimal(text)
    except InvalidOperation:
        pass
    try:
        if isinstance(value, str) and text:
            return _parse_quantity(text)
    except (ValueError, InvalidOperation):
        pass
    raise ValueError(f"not a number: {value!r}")


def parse_amount(value: Any, name: str, default: float = 0.0) -> float:
    """A non-negative number of cores or devices: 2, 0.5, "2", "500m" (a Kubernetes quantity); ValueError naming
    `name` otherwise."""
    if value is None or value == "":
        return default
    try:
        exact = read_amount(value)
    except ValueError:
        raise ValueError(f"{name}: not a number: {value!r}") from None
    number = math.nan if exact.is_nan() else float(exact)
    if not math.isfinite(number):
        raise ValueError(f"{name}: not a number: {value!r}")
    if number < 0:
        raise ValueError(f"{name}: cannot be negative ({value!r})")
    if number > MAX_AMOUNT:
        raise ValueError(f"{name}: at most {MAX_AMOUNT:g} ({value!r})")
    return number


def cpu_quantity(cores: float) -> str:
    """Cores as Kubernetes writes them: 2 → "2", 0.5 → "500m"."""
    return str(int(cores)) if float(cores).is_integer() else f"{max(1, round(cores * 1000))}m"


def memory_quantity(size: int) -> str:
    """Bytes as Kubernetes writes them: 2147483648 → "2Gi", other sizes in the largest exact binary unit."""
    size = int(size)
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def describe(name: str, amount: float) -> str:
    """One amount for people, in pages and messages: "1 CPU core", "2.5 CPU cores", "1.5 GiB", "2 GPUs"
    (memory without "of memory": a sentence says what it is)."""
    if amount == UNLIMITED:
        return _("unlimited")
    if name == "memory":
        return format_bytes(amount)
    if name == "cpu":
        return ngettext("%(n)s CPU core", "%(n)s CPU cores", _plural(amount)) % {"n": f"{amount:g}"}
    if name == "gpu":
        return ngettext("%(n)s GPU", "%(n)s GPUs", _plural(amount)) % {"n": f"{amount:g}"}
    raise ValueError(f"not an amount: {name!r}")


def number(name: str, amount: float) -> str:
    """An amount without its unit where a sentence already names it ("quota 1/4 in use"), memory with its own:
    "1.5", "2 GiB"."""
    return format_bytes(amount) if name == "memory" else f"{amount:g}"


def describe_need(name: str, amount: float) -> str:
    """What something asks for, as a sentence's object: "1 CPU core", "2 GiB of memory", "1 GPU"."""
    if name == "memory":
        return _("%(size)s of memory") % {"size": format_bytes(amount)}
    return describe(name, amount)


def format_bytes(size: float) -> str:
    """1.5 GiB, 512 MiB, 100 bytes: memory as people read it."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            value = size / factor  # 1000-1023 of a unit: whole numbers (three significant digits write "1e+03")
            return f"{value:.3g} {unit}" if value < 999.5 else f"{value:.0f} {unit}"
    return f"{int(size)} bytes"


def _plural(value: float) -> int:
    return 1 if value == 1 else 2


@dataclass(frozen=True)
class Resources:
    """What one replica of a workload asks for (and, as limits, what a quota or a runtime allows)."""

    cpu: float = 1.0
    memory_bytes: int | None = None  # None: asks for no particular amount (no limit on a replica's memory)
    gpu: float = 0.0
    gpu_type: str = ""
    # Shares of a GPU, keyed by the names a cluster gives its vGPU resources (`Cluster.vgpu_resources`, e.g.
    # {"memory": 8000, "cores": 30}); which keys exist is the cluster's business, checked when it is built.
    vgpu: dict[str, float] = field(default_factory=dict)

    # --- reading and writing -------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> Resources:
        """From what people write, {"cpu": "500m", "memory": "4Gi", "gpu": 1, "gpu_type": "A100",
        "vgpu": {"memory": 8000}}; ValueError names the bad field."""
        raw = raw or {}
        unknown = set(raw) - {"cpu", "memory", "gpu", "gpu_type", "vgpu"}
        if unknown:
            raise ValueError(f"unknown resource {sorted(unknown)[0]!r} (use cpu, memory, gpu, gpu_type, vgpu)")
        cpu = parse_amount(raw.get("cpu", 1) or 0, "cpu")
        gpu = parse_amount(raw.get("gpu", 0) or 0, "gpu")
        try:
            memory = parse_memory(raw.get("memory"))
        except ValueError as exc:
            raise ValueError(f"memory: {exc}") from None
        gpu_type = raw.get("gpu_type") or ""
        if isinstance(gpu_type, dict | list):
            raise ValueError(f"gpu_type: not a GPU model name: {gpu_type!r}")
        vgpu_raw = raw.get("vgpu") or {}
        if not isinstance(vgpu_raw, dict):
            raise ValueError(f"vgpu: must be a mapping of vGPU resource to amount, not {vgpu_raw!r}")
        vgpu = {str(key): parse_amount(value, f"vgpu.{key}") for key, value in vgpu_raw.items()}
        return cls(cpu=cpu, memory_bytes=memory, gpu=gpu, gpu_type=str(gpu_type), vgpu=vgpu)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Resources:
        """From any stored shape: {"cpu", "memory_bytes", "gpu", …} (workloads, revisions, `to_json`) or
        {"cpu", "memory", "gpu", …} with memory in bytes (pipeline nodes and tasks, frozen from a spec). What is
        missing asks for nothing."""
        data = data or {}
        memory = data.get("memory_bytes", data.get("memory"))
        return cls(
            cpu=float(data.get("cpu") or 0),
            memory_bytes=int(memory) if memory else None,
            gpu=float(data.get("gpu") or 0),
            gpu_type=str(data.get("gpu_type") or ""),
            vgpu={str(key): float(value) for key, value in (data.get("vgpu") or {}).items()},
        )

    def to_json(self) -> dict[str, Any]:
        """The stored shape (a workload's spec, a revision's config); `from_json` reads it back."""
        return asdict(self)

    as_dict = to_json

    def amounts_json(self) -> dict[str, Any]:
        """Only what adds up, {"cpu", "memory_bytes", "gpu"} (memory 0 for none): the stored shape of a serving
        revision's resources, which ask for no GPU model or vGPU share; `from_json` reads it back."""
        return {"cpu": self.cpu, "memory_bytes": int(self.memory), "gpu": self.gpu}

    def to_spec(self) -> dict[str, Any]:
        """As a pipeline node holds it once validated: the names people write (memory in bytes), and `gpu_type`
        and `vgpu` only when asked for; `parse` reads it back unchanged."""
        spec: dict[str, Any] = {"cpu": self.cpu, "memory": self.memory_bytes, "gpu": self.gpu}
        if self.gpu_type:
            spec["gpu_type"] = self.gpu_type
        if self.vgpu:
            spec["vgpu"] = self.vgpu
        return spec

    def kubernetes(self) -> dict[str, dict[str, str]]:
        """The CPU and memory of a container's `resources`: CPU is requested but not limited (a CPU limit throttles
        bursts for nothing); memory is both (the node stays safe and an overrun is reported as OOMKilled). GPUs and
        vGPU shares are extended resources whose names depend on the cluster (its manifests add them)."""
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if self.cpu > 0:
            requests["cpu"] = cpu_quantity(self.cpu)
        if self.memory_bytes:
            requests["memory"] = limits["memory"] = memory_quantity(self.memory_bytes)
        return {"requests": requests, "limits": limits}

    # --- arithmetic -----------------------------------------------------------------------------------------------

    @classmethod
    def none(cls) -> Resources:
        """Nothing: what adding starts from."""
        return cls(cpu=0.0, memory_bytes=None, gpu=0.0)

    @classmethod
    def of(cls, cpu: Any = 0, memory: Any = 0, gpu: Any = 0) -> Resources:
        """From amounts (Decimal columns, None for nothing or, in limits, `UNLIMITED`)."""
        return cls(cpu=float(cpu or 0), memory_bytes=_memory(memory), gpu=float(gpu or 0))

    @property
    def memory(self) -> float:
        """Memory in bytes, 0 when none is asked for."""
        return self.memory_bytes or 0

    def amount(self, name: str) -> float:
        """The amount of "cpu", "memory" or "gpu"."""
        return {"cpu": self.cpu, "memory": self.memory, "gpu": self.gpu}[name]

    @property
    def is_none(self) -> bool:
        """Whether it asks for nothing that adds up."""
        return not (self.cpu or self.memory or self.gpu)

    def __add__(self, other: Resources) -> Resources:
        return replace(
            self, cpu=self.cpu + other.cpu, memory_bytes=_memory(self.memory + other.memory), gpu=self.gpu + other.gpu
        )

    def __sub__(self, other: Resources) -> Resources:
        return replace(
            self, cpu=self.cpu - other.cpu, memory_bytes=_memory(self.memory - other.memory), gpu=self.gpu - other.gpu
        )

    def __mul__(self, replicas: int) -> Resources:
        return replace(
            self, cpu=self.cpu * replicas, memory_bytes=_memory(self.memory * replicas), gpu=self.gpu * replicas
        )

    __rmul__ = __mul__

    def exceeded_by(self, request: Resources) -> list[str]:
        """The amounts ("gpu", "cpu", "memory", in that order: the scarcest first) of `request` past these limits.
        An amount `request` does not ask for is never past them."""
        return [
            name
            for name in ("gpu", "cpu", "memory")
            if request.amount(name) and request.amount(name) > self.amount(name) + _EPSILON
        ]

    def fits_within(self, limits: Resources) -> bool:
        return not limits.exceeded_by(self)

    def times_within(self, limits: Resources) -> int:
        """How many of this fit in `limits` (a large number when nothing it asks for is limited)."""
        counts = [
            max(int(limits.amount(name) / self.amount(name) + _EPSILON), 0)
            for name in AMOUNTS
            if self.amount(name) and limits.amount(name) != UNLIMITED
        ]
        return min(counts) if counts else 1_000_000

    def __str__(self) -> str:
        """ "2 CPU cores, 4 GiB, 1 GPU" (what it asks for; nothing: "nothing")."""
        parts = [describe(name, self.amount(name)) for name in AMOUNTS if self.amount(name)]
        return ", ".join(parts) or _("nothing")


def _memory(value: Any) -> int | None:
    """Bytes as the field holds them: None for nothing, `UNLIMITED` kept as it is."""
    if value is None or value == 0:
        return None
    if value == UNLIMITED:
        return UNLIMITED  # type: ignore[return-value]  # limits only
    return int(value)


@dataclass(frozen=True)
class Shortfall:
    """One amount a request would take past a limit: what it asks for, what is in use of the limit, the limit and
    what sets it ("quota", "the capacity of this machine")."""

    name: str  # "cpu", "memory" or "gpu"
    asked: float
    in_use: float
    limit: float
    source: str

    @property
    def need(self) -> str:
        """ "1 CPU core", "2 GiB of memory"."""
        return describe_need(self.name, self.asked)

    def __str__(self) -> str:
        """ "1 CPU core — quota 1/4 in use", "2 GiB of memory — quota 1 GiB/2 GiB in use"."""
        values = {
            "need": self.need,
            "source": self.source,
            "used": number(self.name, self.in_use),
            "limit": number(self.name, self.limit),
        }
        return _("%(need)s — %(source)s %(used)s/%(limit)s in use") % values
