"""The distributed strategy's rules (each refusal names its field), its layout, and how the local runtime renders it:
the variables every replica gets, torchrun for several GPUs per replica, DeepSpeed's config file, horovodrun."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from apps.runtime.local.launch import plan
from apps.runtime.strategy import StrategyError, check, deepspeed_config, describe, launch_framework, launch_replicas
from apps.runtime.workload import Resources, Workload


def checked(raw: dict[str, Any], **context: Any) -> tuple[dict[str, Any], Any]:
    values = {"kind": "distributed", "framework": "pytorch", "replicas": {"worker": 2}, "gpus": 0.0}
    values.update(context)
    return check(raw, **values)


@pytest.mark.parametrize(
    ("raw", "context", "field", "words"),
    [
        ({"type": "ddp"}, {"kind": "job"}, "", "Only distributed templates"),
        ("ddp", {}, "", "Must be a mapping"),
        ({"type": "ddp", "batch": 3}, {}, "batch", "Unknown field"),
        ({"type": "megatron"}, {}, "type", "ddp, fsdp, deepspeed, horovod"),
        ({"type": "fsdp"}, {"framework": "tf"}, "type", "frameworks pytorch"),
        ({"type": "ddp", "zero_stage": 2}, {}, "zero_stage", "ZeRO is DeepSpeed's"),
        ({"type": "fsdp", "zero_stage": 0}, {}, "zero_stage", "ZeRO is DeepSpeed's"),
        ({"type": "deepspeed", "zero_stage": 4}, {"gpus": 1}, "zero_stage", "from 0 to 3"),
        ({"type": "ddp", "tensor_parallel": 2}, {}, "tensor_parallel", "data parallel only"),
        ({"type": "horovod", "pipeline_parallel": 2}, {}, "pipeline_parallel", "data parallel only"),
        ({"type": "fsdp", "tensor_parallel": 3}, {"gpus": 2}, "tensor_parallel", "does not divide the world size 4"),
        (
            {"type": "fsdp", "tensor_parallel": 2, "pipeline_parallel": 3},
            {"gpus": 2},
            "pipeline_parallel",
            "tensor × pipeline = 6 does not divide the world size 4",
        ),
        ({"type": "deepspeed"}, {}, "type", "DeepSpeed needs a GPU"),
        (
            {"type": "deepspeed", "zero_stage": 2, "pipeline_parallel": 2},
            {"gpus": 2},
            "zero_stage",
            "cannot combine ZeRO-2 with pipeline parallelism",
        ),
        ({"type": "ddp", "precision": "fp8"}, {}, "precision", "fp32, fp16, bf16"),
        ({"type": "ddp", "precision": "fp16"}, {}, "precision", "fp16 needs a GPU"),
        ({"type": "ddp", "precision": "bf16"}, {"gpus": 1, "gpu_type": "nvidia-tesla-v100"}, "precision", "no bf16"),
        ({"type": "ddp", "precision": "bf16"}, {"gpus": 4, "gpu_type": "Tesla-T4"}, "precision", "no bf16"),
        ({"type": "ddp", "gradient_accumulation": 0}, {}, "gradient_accumulation", "from 1 to 10000"),
        ({"type": "ddp", "gradient_accumulation": True}, {}, "gradient_accumulation", "whole number"),
        ({"type": "ddp", "gradient_checkpointing": "yes"}, {}, "gradient_checkpointing", "true or false"),
        ({"type": "ddp"}, {"gpus": 2, "command": ["bash", "train.sh"]}, "type", "must start with a Python"),
    ],
)
def test_each_rule_refuses_naming_its_field(raw: Any, context: dict, field: str, words: str) -> None:
    with pytest.raises(StrategyError) as caught:
        checked(raw, **context)

    assert caught.value.field == field
    assert words in caught.value.message
    assert str(caught.value).startswith(f"strategy.{field}:" if field else "strategy:")


@pytest.mark.parametrize(
    ("raw", "context"),
    [
        ({"type": "ddp", "precision": "bf16"}, {}),  # torch's CPU autocast has bf16
        ({"type": "ddp", "precision": "bf16"}, {"gpus": 1, "gpu_type": "NVIDIA-A100-SXM4-40GB"}),
        ({"type": "ddp", "precision": "bf16"}, {"gpus": 1}),  # a GPU of unnamed type: the script checks
        ({"type": "fsdp", "precision": "fp16"}, {"gpus": 1, "gpu_type": "nvidia-tesla-t4"}),
        ({"type": "deepspeed", "zero_stage": 1, "pipeline_parallel": 2}, {"gpus": 2}),
        ({"type": "horovod"}, {"framework": "horovod"}),
    ],
)
def test_what_the_device_and_world_allow_passes(raw: dict, context: dict) -> None:
    checked(raw, **context)


def test_the_layout_splits_the_world_into_data_tensor_and_pipeline() -> None:
    raw = {"type": "fsdp", "tensor_parallel": 2, "pipeline_parallel": 2, "precision": "bf16"}
    strategy, layout = checked(raw, replicas={"master": 1, "worker": 1}, gpus=4, gpu_type="H100")

    assert (layout.world, layout.data, layout.tensor, layout.pipeline, layout.procs_per_replica) == (8, 2, 2, 2, 4)
    assert describe(strategy, layout) == "world 8 = dp 2 × tp 2 × pp 2, fsdp, bf16"
    zero = checked({"type": "deepspeed", "zero_stage": 2, "gradient_accumulation": 4}, gpus=2)
    assert describe(*zero) == "world 4 = dp 4 × tp 1 × pp 1, deepspeed, ZeRO-2, fp32, accumulate 4"


def test_a_normalized_strategy_checks_to_itself() -> None:
    strategy, _layout = checked({"type": "deepspeed"}, gpus=1)

    assert strategy == {
        "type": "deepspeed", "zero_stage": 0, "tensor_parallel": 1, "pipeline_parallel": 1, "precision": "fp32",
        "gradient_checkpointing": False, "gradient_accumulation": 1,
    }  # fmt: skip
    assert checked(strategy, gpus=1)[0] == strategy


def test_horovod_launches_through_mpi_with_workers_only() -> None:
    assert launch_framework("pytorch", {"type": "horovod"}) == "horovod"
    assert launch_framework("mpi", {"type": "horovod"}) == "mpi"
    assert launch_framework("pytorch", {"type": "ddp"}) == "pytorch"
    assert launch_replicas("pytorch", {"master": 1, "worker": 2}, {"type": "horovod"}) == {"worker": 3}
    assert launch_replicas("pytorch", {"master": 1, "worker": 2}, {"type": "ddp"}) == {"master": 1, "worker": 2}


def test_the_workload_refuses_a_strategy_that_cannot_run() -> None:
    with pytest.raises(ValueError, match=r"^strategy.precision: fp16 needs a GPU"):
        workload(Path("/tmp"), {"type": "ddp", "precision": "fp16"})


# --- the local runtime ---------------------------------------------------------------------------------------------


def workload(workdir: Path, strategy: dict[str, Any], **overrides: Any) -> Workload:
    values: dict[str, Any] = {
        "uid": "task-1",
        "name": "demo-train",
        "project": "demo",
        "command": ["{python}", "-m", "apps.jobs.builtin_tasks.pytorch_ddp_train", "--epochs", "1"],
        "kind": "distributed",
        "framework": "pytorch",
        "replicas": {"worker": 2},
        "workdir": str(workdir),
        "strategy": strategy,
    }
    values.update(overrides)
    return Workload(**values)


def test_ddp_reaches_every_replica_as_variables(tmp_path: Path) -> None:
    specs = plan(workload(tmp_path, {"type": "ddp", "gradient_accumulation": 4, "precision": "bf16"}))

    assert [s.name for s in specs] == ["worker-0", "worker-1"]
    for rank, spec in enumerate(specs):
        assert spec.argv[:3] == [sys.executable, "-m", "apps.jobs.builtin_tasks.pytorch_ddp_train"]  # no torchrun
        env = spec.env
        assert (env["RANK"], env["WORLD_SIZE"], env["PET_NODE_RANK"], env["PET_NNODES"]) == (
            str(rank),
            "2",
            str(rank),
            "2",
        )
        assert env["PET_NPROC_PER_NODE"] == "1"
        assert (env["PORTAL_STRATEGY_TYPE"], env["PORTAL_PRECISION"]) == ("ddp", "bf16")
        assert (env["PORTAL_GRADIENT_ACCUMULATION"], env["PORTAL_GRADIENT_CHECKPOINTING"]) == ("4", "0")
        assert (env["PORTAL_DATA_PARALLEL"], env["PORTAL_TENSOR_PARALLEL"], env["PORTAL_PIPELINE_PARALLEL"]) == (
            "2", "1", "1",
        )  # fmt: skip
        assert json.loads(env["PORTAL_STRATEGY"])["world_size"] == 2
        assert "PORTAL_DEEPSPEED_CONFIG" not in env
    assert not (tmp_path / ".portal-strategy").exists()


def test_fsdp_with_checkpointing_reaches_the_replicas(tmp_path: Path) -> None:
    specs = plan(workload(tmp_path, {"type": "fsdp", "gradient_checkpointing": True}))

    strategy = json.loads(specs[0].env["PORTAL_STRATEGY"])
    assert strategy["type"] == "fsdp"
    assert strategy["gradient_checkpointing"] is True
    assert specs[1].env["PORTAL_GRADIENT_CHECKPOINTING"] == "1"


def test_deepspeed_zero_2_gets_its_config_file(tmp_path: Path) -> None:
    gpus = Resources(cpu=4, memory_bytes=2**30, gpu=1)
    raw = {"type": "deepspeed", "zero_stage": 2, "precision": "bf16", "gradient_accumulation": 8}
    specs = plan(workload(tmp_path, raw, resources=gpus))

    path = tmp_path / ".portal-strategy" / "deepspeed_config.json"
    assert {s.env["PORTAL_DEEPSPEED_CONFIG"] for s in specs} == {str(path)}
    assert specs[0].env["PORTAL_ZERO_STAGE"] == "2"
    config = json.loads(path.read_text())
    assert config["zero_optimization"] == {"stage": 2}
    assert config["gradient_accumulation_steps"] == 8
    assert (config["bf16"], config["fp16"]) == ({"enabled": True}, {"enabled": False})
    assert "pipeline" not in config
    assert "tensor_parallel" not in config


def test_a_tp_pp_layout_starts_one_torchrun_per_replica(tmp_path: Path) -> None:
    gpus = Resources(cpu=8, memory_bytes=2**30, gpu=4, gpu_type="A100")
    raw = {"type": "deepspeed", "zero_stage": 1, "tensor_parallel": 2, "pipeline_parallel": 2}
    specs = plan(workload(tmp_path, raw, resources=gpus))

    assert len(specs) == 2
    for rank, spec in enumerate(specs):
        assert spec.argv[:5] == [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "-m",
            "apps.jobs.builtin_tasks.pytorch_ddp_train",
        ]
        assert (spec.env["PET_NPROC_PER_NODE"], spec.env["PET_NNODES"], spec.env["PET_NODE_RANK"]) == (
            "4",
            "2",
            str(rank),
        )
        assert spec.env["PET_MASTER_PORT"] == specs[0].env["MASTER_PORT"]
        layout = json.loads(spec.env["PORTAL_STRATEGY"])
        keys = ("world_size", "data_parallel", "tensor_parallel", "pipeline_parallel")
        assert [layout[key] for key in keys] == [8, 2, 2, 2]
    config = json.loads((tmp_path / ".portal-strategy" / "deepspeed_config.json").read_text())
    assert (config["tensor_parallel"], config["pipeline"]) == ({"autotp_size": 2}, {"stages": 2})


def test_horovod_runs_one_horovodrun_for_every_rank(tmp_path: Path) -> None:
    specs = plan(workload(tmp_path, {"type": "horovod"}, framework="horovod", replicas={"worker": 3}))

    assert [s.name for s in specs] == ["launcher-0"]
    argv = specs[0].argv
    assert argv[:5] == [str(Path(sys.executable).parent / "horovodrun"), "-np", "3", "-H", "127.0.0.1:3"]
    assert argv[5:7] == [sys.executable, "-m"]
    assert specs[0].env["PORTAL_STRATEGY_TYPE"] == "horovod"


def test_deepspeed_config_names_only_what_is_asked() -> None:
    strategy, layout = checked({"type": "deepspeed", "zero_stage": 3, "gradient_checkpointing": True}, gpus=1)

    config = deepspeed_config(strategy, layout)
    assert config["zero_optimization"] == {"stage": 3}
    assert config["activation_checkpointing"] == {"partition_activations": False}
