"""A strategy on Kubernetes: its variables in every replica, torchrun and nprocPerNode for several GPUs per replica,
DeepSpeed's config as a mounted ConfigMap, Horovod as an MPIJob; every object valid against the schemas."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.strategy import launch_framework, launch_replicas
from apps.runtime.workload import Resources
from tests.runtime.kubernetes.samples import sample_distributed, sample_profile


def built(sample: str, strategy: dict[str, Any], **overrides: Any) -> list[dict[str, Any]]:
    objs = build(sample_distributed(sample, strategy=strategy, **overrides), sample_profile())
    validate_all(objs, "1.33")
    return objs


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container["env"]}


def containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    key = next(k for k in obj["spec"] if k.endswith("ReplicaSpecs"))
    return {role: spec["template"]["spec"]["containers"][0] for role, spec in obj["spec"][key].items()}


def test_ddp_gives_every_replica_the_strategy() -> None:
    objs = built("pytorch", {"type": "ddp", "gradient_accumulation": 4, "gradient_checkpointing": True})

    assert [o["kind"] for o in objs] == ["PyTorchJob"]
    assert "nprocPerNode" not in objs[0]["spec"]
    for container in containers(objs[0]).values():
        env = env_of(container)
        assert container["command"][:3] == ["python", "-m", "apps.jobs.builtin_tasks.ddp_check"]
        assert (env["PORTAL_STRATEGY_TYPE"], env["PORTAL_GRADIENT_ACCUMULATION"]) == ("ddp", "4")
        assert env["PORTAL_GRADIENT_CHECKPOINTING"] == "1"
        assert json.loads(env["PORTAL_STRATEGY"])["world_size"] == 2  # {"worker": 2}: Master 1 + Worker 1


def test_fsdp_in_bf16_on_gpus() -> None:
    gpus = Resources(cpu=4, memory_bytes=2**34, gpu=1, gpu_type="A100")
    objs = built("pytorch", {"type": "fsdp", "precision": "bf16"}, resources=gpus)

    master = env_of(containers(objs[0])["Master"])
    assert (master["PORTAL_STRATEGY_TYPE"], master["PORTAL_PRECISION"]) == ("fsdp", "bf16")
    assert containers(objs[0])["Master"]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_deepspeed_zero_2_mounts_its_config_from_a_config_map() -> None:
    gpus = Resources(cpu=4, memory_bytes=2**34, gpu=1)
    raw = {"type": "deepspeed", "zero_stage": 2, "precision": "bf16", "gradient_accumulation": 8}
    objs = built("pytorch", raw, resources=gpus)

    job, config_map = objs
    assert (job["kind"], config_map["kind"]) == ("PyTorchJob", "ConfigMap")
    config = json.loads(config_map["data"]["deepspeed_config.json"])
    assert (config["zero_optimization"], config["gradient_accumulation_steps"]) == ({"stage": 2}, 8)
    assert config["bf16"] == {"enabled": True}
    for role, container in containers(job).items():
        env = env_of(container)
        assert env["PORTAL_DEEPSPEED_CONFIG"] == "/etc/portal/strategy/deepspeed_config.json"
        assert env["PORTAL_ZERO_STAGE"] == "2"
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/portal/strategy")
        key = next(k for k in job["spec"] if k.endswith("ReplicaSpecs"))
        volumes = {v["name"]: v for v in job["spec"][key][role]["template"]["spec"]["volumes"]}
        assert volumes[mount["name"]]["configMap"] == {"name": config_map["metadata"]["name"]}
    assert config_map["metadata"]["labels"] == job["metadata"]["labels"]  # deleted with the workload


def test_deepspeed_on_its_own_framework_is_an_mpi_job_with_a_slot_per_gpu() -> None:
    objs = built("deepspeed", {"type": "deepspeed", "zero_stage": 2})  # the sample has 2 GPUs per worker

    job, config_map = objs
    assert (job["kind"], job["spec"]["slotsPerWorker"], config_map["kind"]) == ("MPIJob", 2, "ConfigMap")
    launcher = containers(job)["Launcher"]
    assert launcher["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "4"]
    assert env_of(launcher)["PORTAL_ZERO_STAGE"] == "2"


def test_a_tp_pp_layout_runs_torchrun_with_a_process_per_gpu() -> None:
    gpus = Resources(cpu=16, memory_bytes=2**36, gpu=4, gpu_type="H100")
    raw = {"type": "fsdp", "tensor_parallel": 2, "pipeline_parallel": 2, "precision": "bf16"}
    objs = built("pytorch", raw, replicas={"worker": 2}, resources=gpus)

    job = objs[0]
    assert job["spec"]["nprocPerNode"] == "4"
    for container in containers(job).values():
        assert container["command"][:5] == [
            "python",
            "-m",
            "torch.distributed.run",
            "-m",
            "apps.jobs.builtin_tasks.ddp_check",
        ]
        layout = json.loads(env_of(container)["PORTAL_STRATEGY"])
        keys = ("world_size", "data_parallel", "tensor_parallel", "pipeline_parallel")
        assert [layout[key] for key in keys] == [8, 2, 2, 2]


def test_horovod_on_a_pytorch_template_is_an_mpi_job() -> None:
    replicas, strategy = {"master": 1, "worker": 2}, {"type": "horovod"}
    # What the dispatcher builds from a pytorch template with this strategy (dispatcher.build_workload).
    workload = sample_distributed("pytorch", strategy=strategy, replicas={"master": 1, "worker": 1})
    workload = replace(
        workload,
        framework=launch_framework("pytorch", strategy),
        replicas=launch_replicas("pytorch", replicas, strategy),
    )
    objs = build(workload, sample_profile())
    validate_all(objs, "1.33")

    job = objs[0]
    assert job["kind"] == "MPIJob"
    assert {t: s["replicas"] for t, s in job["spec"]["mpiReplicaSpecs"].items()} == {"Launcher": 1, "Worker": 3}
    assert containers(job)["Launcher"]["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "3"]
    assert env_of(containers(job)["Worker"])["PORTAL_STRATEGY_TYPE"] == "horovod"
