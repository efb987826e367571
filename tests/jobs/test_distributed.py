"""The built-in distributed templates run through the orchestrator and a real local agent: one process per
replica with the operator's env contract, each replica's output stored under its own name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from tests.factories import ProjectFactory, UserFactory, pipeline
from tests.jobs.conftest import AgentProcess, drive

pytestmark = [pytest.mark.live]


@pytest.fixture
def owner(transactional_db):
    return UserFactory(username="alice")


@pytest.fixture
def project(owner):
    load_builtin_templates()  # the test database is flushed between transactional tests
    return ProjectFactory(owner=owner, slug="project-a")


def lines_by_replica(task) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for replica, text in LogLine.objects.filter(task=task).order_by("seq").values_list("replica", "text"):
        found.setdefault(replica, []).append(text)
    return found


def test_pytorch_ddp_train_runs_two_replicas_in_the_train_environment(agent, project, owner, train_python):
    nodes = [{"name": "train", "template": "pytorch-ddp-train", "args": {"epochs": 3, "samples": 256}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner), timeout=240)

    task = run.tasks.get()
    assert (run.status, task.status) == ("succeeded", "succeeded"), (run.reason, task.reason, lines_by_replica(task))
    logs = lines_by_replica(task)
    assert set(logs) == {"worker-0", "worker-1"}
    assert any(line.startswith("rank 0/2 (local 0): joining 127.0.0.1:") for line in logs["worker-0"])
    assert any(line.startswith("rank 1/2 (local 1): joining 127.0.0.1:") for line in logs["worker-1"])
    assert any(line.startswith("epoch 3/3: loss") for line in logs["worker-0"])
    # In the sandbox too, each replica's host and its peers have names (docs/security.md, /etc/hosts): c10d and
    # gloo looked them up in vain at every join.
    lookups = ("cannot be retrieved", "Unable to resolve hostname")
    assert not [line for lines in logs.values() for line in lines if any(text in line for text in lookups)]
    metrics = json.loads((Path(task.output_dir) / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["rows_per_rank"] == 128
    assert metrics["torch_version"].startswith("2.13.0")
    assert (Path(task.output_dir) / "model.pt").is_file()


def test_tf_multiworker_check_gives_each_replica_a_valid_tf_config(agent, project, owner):
    nodes = [{"name": "check", "template": "tf-multiworker-check", "args": {"expect_workers": 2}}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))

    task = run.tasks.get()
    assert (run.status, task.status) == ("succeeded", "succeeded"), (run.reason, task.reason, lines_by_replica(task))
    logs = lines_by_replica(task)
    assert set(logs) == {"worker-0", "worker-1"}
    for index in (0, 1):
        assert f"TF_CONFIG ok: this is worker {index}; cluster of 2 (worker=2)" in logs[f"worker-{index}"]
    addresses = [line for replica in ("worker-0", "worker-1") for line in logs[replica] if "address:" in line]
    assert len(set(addresses)) == 2  # each replica has its own host:port
    summary = json.loads((Path(task.output_dir) / "tf_config.json").read_text())
    assert summary["workers"] == 2


@pytest.fixture
def agent_without_train(transactional_db, tmp_path, settings):
    """An agent whose "train" task environment points at an interpreter that does not exist."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    process = AgentProcess(tmp_path, env={"PORTAL_TASK_ENV_TRAIN": str(tmp_path / "no-venv" / "bin" / "python")})
    process.start()
    yield process
    process.stop()


def test_a_missing_task_environment_fails_the_task_with_the_reason(agent_without_train, project, owner, tmp_path):
    nodes = [{"name": "train", "template": "pytorch-ddp-train"}]
    run = drive(start_run(pipeline(project, owner, nodes), owner))

    task = run.tasks.get()
    missing = tmp_path / "no-venv" / "bin" / "python"
    assert task.status == "failed"
    assert task.reason == (
        f"could not start: task environment 'train' is not installed (no {missing}): run `make train-env`"
    )
    assert run.status == "failed"


def test_the_nodes_strategy_reaches_the_training_script_and_is_applied(agent, project, owner, train_python):
    """ddp with gradient accumulation, bf16 autocast on CPU and gradient checkpointing: the script reads the
    strategy the runtime rendered (PORTAL_STRATEGY) and steps the optimizer once every two micro-batches."""
    strategy = {"type": "ddp", "gradient_accumulation": 2, "precision": "bf16", "gradient_checkpointing": True}
    args = {"epochs": 2, "samples": 256, "batch_size": 32, "hidden": 8}
    nodes = [{"name": "train", "template": "pytorch-ddp-train", "args": args, "strategy": strategy}]
    run = drive(start_run(pipeline(project, owner, nodes), owner), timeout=240)

    task = run.tasks.get()
    assert (run.status, task.status) == ("succeeded", "succeeded"), (run.reason, task.reason, lines_by_replica(task))
    logs = lines_by_replica(task)
    assert set(logs) == {"worker-0", "worker-1"}
    assert (
        "strategy ddp: precision bf16 (forward in bfloat16), gradient accumulation 2, gradient checkpointing on"
        in logs["worker-0"]
    )
    metrics = json.loads((Path(task.output_dir) / "metrics.json").read_text())
    assert metrics["strategy"]["type"] == "ddp"
    assert metrics["strategy"]["gradient_accumulation"] == 2
    assert metrics["strategy"]["gradient_checkpointing"] is True
    assert metrics["compute_dtype"] == "bfloat16"
    # 128 rows per rank in batches of 32: 4 micro-batches an epoch, the optimizer stepping on every second one.
    assert (metrics["micro_batches"], metrics["optimizer_steps"]) == (8, 4)
    assert metrics["world_size"] == 2


def test_fsdp_trains_on_cpu_with_gloo(agent, project, owner, train_python):
    strategy = {"type": "fsdp", "gradient_accumulation": 3}
    nodes = [
        {"name": "train", "template": "pytorch-ddp-train", "args": {"epochs": 1, "samples": 256, "hidden": 8},
         "strategy": strategy},
    ]  # fmt: skip
    run = drive(start_run(pipeline(project, owner, nodes), owner), timeout=240)

    task = run.tasks.get()
    assert (run.status, task.status) == ("succeeded", "succeeded"), (run.reason, task.reason, lines_by_replica(task))
    metrics = json.loads((Path(task.output_dir) / "metrics.json").read_text())
    assert (metrics["strategy"]["type"], metrics["micro_batches"], metrics["optimizer_steps"]) == ("fsdp", 4, 2)
    assert (Path(task.output_dir) / "model.pt").is_file()
