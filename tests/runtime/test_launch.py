"""How the local runtime turns a command's interpreter tokens into task environments' interpreters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from apps.runtime.local.launch import TaskEnvironmentMissing, expand, plan
from apps.runtime.workload import Workload


def fake_python(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def envs(tmp_path: Path) -> dict[str, str]:
    return {"default": sys.executable, "train": fake_python(tmp_path / "venv-train" / "bin" / "python")}


def test_python_is_the_default_environment_and_python_colon_name_a_named_one(envs: dict[str, str]) -> None:
    argv = ["{python}", "-m", "a", "--then", "{python:train}", "x{python}", "{python:train}y"]

    assert expand(argv, envs) == [sys.executable, "-m", "a", "--then", envs["train"], "x{python}", "{python:train}y"]


def test_it_reads_the_environments_from_settings(settings, envs: dict[str, str]) -> None:
    settings.PORTAL_TASK_ENVS = envs

    assert expand(["{python:train}", "-c", "pass"]) == [envs["train"], "-c", "pass"]
    assert expand(["{python}"]) == [sys.executable]


def test_the_settings_offer_default_and_train(settings) -> None:
    assert settings.PORTAL_TASK_ENVS["default"] == sys.executable
    assert settings.PORTAL_TASK_ENVS["train"] == str(Path(settings.BASE_DIR) / ".venv-train" / "bin" / "python")


def test_a_missing_train_environment_says_how_to_install_it(envs: dict[str, str], tmp_path: Path) -> None:
    envs["train"] = str(tmp_path / "nowhere" / "bin" / "python")

    with pytest.raises(TaskEnvironmentMissing) as caught:
        expand(["{python:train}", "-m", "apps.jobs.builtin_tasks.pytorch_ddp_train"], envs)

    assert isinstance(caught.value, OSError)  # what the agent reports as "could not start: …"
    assert caught.value.env == "train"
    assert str(caught.value) == (
        f"task environment 'train' is not installed (no {tmp_path}/nowhere/bin/python): run `make train-env`"
    )


def test_a_missing_environment_without_a_recipe_names_its_setting(envs: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "not-executable").write_text("")
    envs["vision"] = str(tmp_path / "not-executable")  # ("llm" has a recipe now: `make llm-env`)

    with pytest.raises(TaskEnvironmentMissing, match=r"'vision' is not installed .*: set PORTAL_TASK_ENV_VISION to"):
        expand(["{python:vision}"], envs)


@pytest.mark.parametrize("token", ["{python:nope}", "{python:}"])
def test_an_unknown_environment_lists_the_known_ones(envs: dict[str, str], token: str) -> None:
    with pytest.raises(
        TaskEnvironmentMissing, match=r"unknown task environment '(nope)?' \(this machine has: default, "
    ):
        expand([token], envs)


def test_plan_fails_before_any_replica_when_the_environment_is_missing(settings, tmp_path: Path) -> None:
    settings.PORTAL_TASK_ENVS = {"default": sys.executable, "train": str(tmp_path / "missing")}
    workload = Workload(
        uid="w1",
        name="ddp",
        project="p",
        command=["{python:train}", "-m", "apps.jobs.builtin_tasks.pytorch_ddp_train"],
        kind="distributed",
        framework="pytorch",
        replicas={"worker": 2},
    )

    with pytest.raises(TaskEnvironmentMissing, match="run `make train-env`"):
        plan(workload)


def test_plan_gives_every_replica_the_named_interpreter(settings, envs: dict[str, str]) -> None:
    settings.PORTAL_TASK_ENVS = envs
    workload = Workload(
        uid="w2",
        name="ddp",
        project="p",
        command=["{python:train}", "-m", "mod"],
        kind="distributed",
        framework="pytorch",
        replicas={"worker": 2},
    )

    specs = plan(workload)

    assert [spec.name for spec in specs] == ["worker-0", "worker-1"]
    assert {spec.argv[0] for spec in specs} == {envs["train"]}


def test_a_spark_application_is_one_process_locally_whatever_its_executors(settings, envs: dict[str, str]) -> None:
    # local[N] in that process's JVM is the driver and the executors (docs/spark.md).
    settings.PORTAL_TASK_ENVS = envs
    workload = Workload(
        uid="w3",
        name="features",
        project="p",
        command=["{python:train}", "-m", "apps.jobs.builtin_tasks.spark_features"],
        kind="distributed",
        framework="spark",
        replicas={"driver": 1, "executor": 3},
    )

    specs = plan(workload)

    assert [(spec.name, spec.argv[0]) for spec in specs] == [("0", envs["train"])]
    assert "MASTER_ADDR" not in specs[0].env
