"""The distributed strategy of a distributed workload (docs/distributed.md): how its processes share the model and
the data, checked against the processes it really has, and rendered the same way on both runtimes.

`strategy: {type, zero_stage, tensor_parallel, pipeline_parallel, precision, gradient_checkpointing,
gradient_accumulation}` — type ddp | fsdp | deepspeed | horovod; precision fp32 | fp16 | bf16.

The world size is replicas × processes per replica, and a replica starts one process per GPU it has (one when it
has none: a CPU replica is one gloo process). tensor × pipeline × data = world size, so tensor × pipeline must divide
it and data parallelism is what is left. The rules (each error names its field, `strategy.<field>: …`):

- ddp and horovod are data parallel only: tensor_parallel and pipeline_parallel stay 1;
- ZeRO (zero_stage) is DeepSpeed's; DeepSpeed does not combine ZeRO-2/3 with pipeline parallelism;
- DeepSpeed needs GPUs here (its CPU accelerator needs Intel's extension, which no task environment has);
- fp16 needs a GPU (on CPU, torch's autocast in float16 trains without loss scaling: use bf16 or fp32);
- bf16 needs a GPU of the Ampere generation or later: a `resources.gpu_type` known to lack it (V100, T4, P100, …)
  is refused; a GPU of unnamed type is allowed (the training script checks `torch.cuda.is_bf16_supported()`);
  on CPU, bf16 is allowed (torch's CPU autocast has it);
- which frameworks a type runs on: ddp and fsdp on pytorch; deepspeed on pytorch (torchrun's env) or deepspeed
  (an MPIJob); horovod on pytorch, horovod or mpi, always launched through MPI (an MPIJob; `horovodrun` locally).

Rendering (`env_of`, `deepspeed_config`, `launch_command`): every replica gets PORTAL_STRATEGY (the block and its
layout as JSON) and one PORTAL_* variable per field; DeepSpeed gets its config as a JSON file named by
PORTAL_DEEPSPEED_CONFIG; replicas with more than one GPU start their processes with torchrun
(`python -m torch.distributed.run`, reading the PET_* variables the training operator sets, and the local runtime
too). This module has no Django models and imports nothing of the portal's but its translations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

TYPES = ("ddp", "fsdp", "deepspeed", "horovod")
PRECISIONS = ("fp32", "fp16", "bf16")
KEYS = (
    "type", "zero_stage", "tensor_parallel", "pipeline_parallel", "precision", "gradient_checkpointing",
    "gradient_accumulation",
)  # fmt: skip
# The frameworks (Workload.framework, JobTemplate.framework) each type runs on.
TYPE_FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "ddp": ("pytorch",),
    "fsdp": ("pytorch",),
    "deepspeed": ("pytorch", "deepspeed"),
    "horovod": ("pytorch", "horovod", "mpi"),
}
MPI_FRAMEWORKS = ("mpi", "horovod", "deepspeed")
MAX_PARALLEL = 4096
MAX_ACCUMULATION = 10_000
# GPU types without bfloat16 (before Ampere), as cloud node labels name them: nvidia-tesla-v100, Tesla-T4, …
NO_BF16_GPU_RE = re.compile(
    r"(?:^|[^a-z0-9])(v100|t4|p100|p40|p4|k80|k40|m60|m40|titan-?v|gtx-?\d+|rtx-?20\d0|quadro-?rtx-?\d+)(?:$|[^a-z0-9])",
    re.IGNORECASE,
)
# Where a pod finds the DeepSpeed config (a ConfigMap mounted there); locally it is a file in the workdir.
CLUSTER_CONFIG_DIR = "/etc/portal/strategy"
LOCAL_CONFIG_DIR = ".portal-strategy"
DEEPSPEED_CONFIG_FILE = "deepspeed_config.json"
_PYTHON_RE = re.compile(r"^(\{python(?::[^{}]*)?\}|(?:.*/)?python(?:3(?:\.\d+)?)?)$")


class StrategyError(ValueError):
    """A strategy that cannot run: `field` is the key in the block ("" for the block itself)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{self.key}: {message}")

    @property
    def key(self) -> str:
        return f"strategy.{self.field}" if self.field else "strategy"


@dataclass(frozen=True)
class Layout:
    """How the world splits: world = replicas × procs_per_replica = data × tensor × pipeline."""

    replicas: int
    procs_per_replica: int
    tensor: int
    pipeline: int

    @property
    def world(self) -> int:
        return self.replicas * self.procs_per_replica

    @property
    def data(self) -> int:
        return self.world // (self.tensor * self.pipeline)

    def to_json(self) -> dict[str, int]:
        return {
            "world_size": self.world,
            "replicas": self.replicas,
            "procs_per_replica": self.procs_per_replica,
            "data_parallel": self.data,
            "tensor_parallel": self.tensor,
            "pipeline_parallel": self.pipeline,
        }


def _whole(raw: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StrategyError(key, _("Must be a whole number from %(low)s to %(high)s.") % {"low": low, "high": high})
    return value


def normalize(raw: Any) -> dict[str, Any]:
    """The block with every key present and each value checked on its own (no world size yet)."""
    if not isinstance(raw, dict):
        raise StrategyError("", _("Must be a mapping of %(keys)s.") % {"keys": ", ".join(KEYS)})
    for key in raw:
        if key not in KEYS:
            raise StrategyError(str(key), _("Unknown field (use %(keys)s).") % {"keys": ", ".join(KEYS)})
    kind = raw.get("type")
    if kind not in TYPES:
        raise StrategyError("type", _("Must be one of %(choices)s.") % {"choices": ", ".join(TYPES)})
    precision = raw.get("precision") or "fp32"
    if precision not in PRECISIONS:
        raise StrategyError("precision", _("Must be one of %(choices)s.") % {"choices": ", ".join(PRECISIONS)})
    checkpointing = raw.get("gradient_checkpointing", False)
    if not isinstance(checkpointing, bool):
        raise StrategyError("gradient_checkpointing", _("Must be true or false."))
    zero = raw.get("zero_stage")
    if zero is not None:
        zero = _whole(raw, "zero_stage", 0, 0, 3)
        if kind != "deepspeed":
            raise StrategyError(
                "zero_stage",
                _("ZeRO is DeepSpeed's: use type deepspeed, or leave zero_stage out (fsdp shards like ZeRO-3)."),
            )
    elif kind == "deepspeed":
        zero = 0
    return {
        "type": kind,
        "zero_stage": zero,
        "tensor_parallel": _whole(raw, "tensor_parallel", 1, 1, MAX_PARALLEL),
        "pipeline_parallel": _whole(raw, "pipeline_parallel", 1, 1, MAX_PARALLEL),
        "precision": precision,
        "gradient_checkpointing": checkpointing,
        "gradient_accumulation": _whole(raw, "gradient_accumulation", 1, 1, MAX_ACCUMULATION),
    }


def replica_count(replicas: Mapping[str, Any] | None) -> int:
    """The replicas that train (an MPI launcher does not); no replicas given is one worker, as the runtimes have it."""
    if not isinstance(replicas, Mapping):
        return 1
    whole = [n for role, n in replicas.items() if role != "launcher" and not isinstance(n, bool)]
    counts = [int(n) for n in whole if isinstance(n, int) or (isinstance(n, str) and n.isdigit())]
    return max(sum(counts), 1)


def procs_per_replica(gpus: float) -> int:
    """One process per whole GPU of a replica; one for a replica without (or with a fraction of) a GPU."""
    return max(1, int(gpus or 0))


def check(
    raw: Any,
    *,
    kind: str,
    framework: str,
    replicas: Mapping[str, Any] | None,
    gpus: float,
    gpu_type: str = "",
    command: list[str] | None = None,
) -> tuple[dict[str, Any], Layout]:
    """The normalized block and its layout for a workload with these replicas and GPUs per replica.

    StrategyError names the first field that cannot run (see the module docstring for the rules)."""
    if kind != "distributed":
        raise StrategyError("", _("Only distributed templates take a strategy."))
    strategy = normalize(raw)
    kind_name = strategy["type"]
    if framework not in TYPE_FRAMEWORKS[kind_name]:
        raise StrategyError(
            "type",
            _("%(type)s runs on the frameworks %(frameworks)s, not “%(framework)s”.")
            % {"type": kind_name, "frameworks": ", ".join(TYPE_FRAMEWORKS[kind_name]), "framework": framework or "-"},
        )
    layout = Layout(
        replica_count(replicas), procs_per_replica(gpus), strategy["tensor_parallel"], strategy["pipeline_parallel"]
    )
    world_text = _("%(world)s (%(replicas)s replica(s) × %(procs)s process(es) each, one per GPU)") % {
        "world": layout.world,
        "replicas": layout.replicas,
        "procs": layout.procs_per_replica,
    }
    if kind_name in ("ddp", "horovod"):
        for field in ("tensor_parallel", "pipeline_parallel"):
            if strategy[field] != 1:
                message = _("%(type)s is data parallel only: use fsdp or deepspeed to split the model.")
                raise StrategyError(field, message % {"type": kind_name})
    if layout.world % layout.tensor:
        raise StrategyError(
            "tensor_parallel",
            _("%(tp)s does not divide the world size %(world)s; tensor × pipeline × data must equal it.")
            % {"tp": layout.tensor, "world": world_text},
        )
    if layout.world % (layout.tensor * layout.pipeline):
        raise StrategyError(
            "pipeline_parallel",
            _(
                "tensor × pipeline = %(product)s does not divide the world size %(world)s; "
                "tensor × pipeline × data must equal it."
            )
            % {"product": layout.tensor * layout.pipeline, "world": world_text},
        )
    if kind_name == "deepspeed":
        if gpus < 1:
            raise StrategyError(
                "type", _("DeepSpeed needs a GPU per replica here (resources.gpu ≥ 1); on CPU use ddp or fsdp.")
            )
        if strategy["zero_stage"] >= 2 and layout.pipeline > 1:
            raise StrategyError(
                "zero_stage",
                _(
                    "DeepSpeed cannot combine ZeRO-%(stage)s with pipeline parallelism: "
                    "use zero_stage 0 or 1, or pipeline_parallel 1."
                )
                % {"stage": strategy["zero_stage"]},
            )
    if strategy["precision"] == "fp16" and gpus <= 0:
        raise StrategyError("precision", _("fp16 needs a GPU; on CPU use bf16 or fp32."))
    if strategy["precision"] == "bf16" and gpus > 0 and gpu_type and NO_BF16_GPU_RE.search(gpu_type):
        raise StrategyError(
            "precision",
            _("GPU type “%(gpu_type)s” has no bf16 (it needs Ampere or later): use fp16 or fp32.")
            % {"gpu_type": gpu_type},
        )
    torchrun = layout.procs_per_replica > 1 and kind_name != "horovod" and command is not None
    if torchrun and not (command and _PYTHON_RE.match(str(command[0]))):
        raise StrategyError(
            "type",
            _(
                "%(procs)s GPUs per replica start %(procs)s processes with torchrun: "
                "the command must start with a Python interpreter."
            )
            % {"procs": layout.procs_per_replica},
        )
    return strategy, layout


def launch_framework(framework: str, strategy: Mapping[str, Any] | None) -> str:
    """The framework the runtimes launch: Horovod always through MPI (an MPIJob; horovodrun locally)."""
    if strategy and strategy.get("type") == "horovod" and framework not in MPI_FRAMEWORKS:
        return "horovod"
    return framework


def launch_replicas(framework: str, replicas: Mapping[str, int], strategy: Mapping[str, Any] | None) -> dict[str, int]:
    """The replicas the runtimes launch: a Horovod job moved onto MPI has only workers (its launcher is implicit)."""
    if launch_framework(framework, strategy) != framework:
        return {"worker": replica_count(replicas)}
    return dict(replicas)


def launch_command(command: list[str], procs: int) -> list[str]:
    """The command of one replica that starts `procs` processes: `python -m torch.distributed.run <the rest>`, which
    reads the PET_* variables for the nodes, this node's rank, the processes per node and the master."""
    if procs <= 1:
        return list(command)
    return [command[0], "-m", "torch.distributed.run", *command[1:]]


def describe(strategy: Mapping[str, Any], layout: Layout) -> str:
    """One line for people: "world 8 = dp 2 × tp 2 × pp 2, ZeRO-2, bf16"."""
    parts = [f"world {layout.world} = dp {layout.data} × tp {layout.tensor} × pp {layout.pipeline}"]
    parts.append(strategy["type"])
    if strategy.get("zero_stage"):
        parts.append(f"ZeRO-{strategy['zero_stage']}")
    parts.append(strategy["precision"])
    if strategy.get("gradient_accumulation", 1) > 1:
        parts.append(_("accumulate %(steps)s") % {"steps": strategy["gradient_accumulation"]})
    if strategy.get("gradient_checkpointing"):
        parts.append(_("checkpointing"))
    return ", ".join(parts)


def deepspeed_config(strategy: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    """The DeepSpeed config JSON. The batch size is the training script's (it sets train_micro_batch_size_per_gpu
    before `deepspeed.initialize`); pipeline stages are built in its code (PipelineModule(num_stages=…))."""
    config: dict[str, Any] = {
        "gradient_accumulation_steps": strategy["gradient_accumulation"],
        "zero_optimization": {"stage": strategy["zero_stage"] or 0},
        "fp16": {"enabled": strategy["precision"] == "fp16"},
        "bf16": {"enabled": strategy["precision"] == "bf16"},
        "gradient_clipping": 1.0,
    }
    if layout.tensor > 1:
        config["tensor_parallel"] = {"autotp_size": layout.tensor}
    if layout.pipeline > 1:
        config["pipeline"] = {"stages": layout.pipeline}
    if strategy["gradient_checkpointing"]:
        config["activation_checkpointing"] = {"partition_activations": layout.tensor > 1}
    return config


def env_of(strategy: Mapping[str, Any], layout: Layout, config_dir: str) -> dict[str, str]:
    """What every replica's processes read: the block and its layout, one variable per field, and where DeepSpeed's
    config file is (`config_dir`: the mounted ConfigMap in a pod, the workdir's folder locally)."""
    env = {
        "PORTAL_STRATEGY": json.dumps({**strategy, **layout.to_json()}, sort_keys=True),
        "PORTAL_STRATEGY_TYPE": strategy["type"],
        "PORTAL_PRECISION": strategy["precision"],
        "PORTAL_GRADIENT_ACCUMULATION": str(strategy["gradient_accumulation"]),
        "PORTAL_GRADIENT_CHECKPOINTING": "1" if strategy["gradient_checkpointing"] else "0",
        "PORTAL_DATA_PARALLEL": str(layout.data),
        "PORTAL_TENSOR_PARALLEL": str(layout.tensor),
        "PORTAL_PIPELINE_PARALLEL": str(layout.pipeline),
    }
    if strategy["type"] == "deepspeed":
        env["PORTAL_ZERO_STAGE"] = str(strategy["zero_stage"] or 0)
        env["PORTAL_DEEPSPEED_CONFIG"] = f"{config_dir.rstrip('/')}/{DEEPSPEED_CONFIG_FILE}"
    return env
