"""The deploy task's arguments and inputs, run as the runtime runs it (a subprocess with the portal's env contract):
what it cannot work out fails the task with one line saying why, before any request. Deploying for real:
tests/jobs/test_automl_demo_pipeline.py (live)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobs.test_builtin_tasks import run_task


def registered(folder: Path, name: str = "iris", version: int = 2) -> Path:
    folder.mkdir(parents=True)
    (folder / "registered.json").write_text(json.dumps({"name": name, "version": version}))
    return folder


@pytest.mark.parametrize("model", ["iris", "models:/iris", "models:/iris/0", "models:/iris/x", "models:/@prod"])
def test_a_model_that_is_not_a_version_or_an_alias_fails_saying_what_to_give(tmp_path, model):
    result = run_task("deploy", tmp_path / "serve", "--service", "iris-onnx", "--model", model)

    assert result.returncode == 2
    assert f"--model {model!r}: give models:/name/3 or models:/name@alias" in result.stderr


def test_without_a_model_it_needs_exactly_one_upstream_registered_version(tmp_path):
    one, two = registered(tmp_path / "a"), registered(tmp_path / "b")

    none = run_task("deploy", tmp_path / "serve", "--service", "iris-onnx")
    both = run_task("deploy", tmp_path / "serve2", "--service", "iris-onnx", inputs={"a": one, "b": two})

    assert none.returncode == both.returncode == 2
    assert "put the task after one node that registers a version (found 0 registered.json upstream)" in none.stderr
    assert "(found 2 registered.json upstream)" in both.stderr


def test_it_says_when_the_portal_does_not_answer(tmp_path):
    upstream = registered(tmp_path / "optimise")

    result = run_task("deploy", tmp_path / "serve", "--service", "iris-onnx", inputs={"optimise": upstream})

    assert result.returncode == 1
    assert "error: GET services/?project=project-a&search=iris-onnx: " in result.stderr  # port 9: nothing answers
    assert not (tmp_path / "serve" / "deployed.json").exists()


def test_outside_a_pipeline_it_asks_for_the_api(tmp_path):
    result = run_task("deploy", tmp_path / "serve", "--service", "s", "--model", "models:/iris/1", PORTAL_API_TOKEN="")

    assert result.returncode == 2
    assert "PORTAL_API_URL and PORTAL_API_TOKEN are not set: run this as a task of a pipeline" in result.stderr


def test_bad_numbers_fail_before_anything(tmp_path):
    empty = run_task("deploy", tmp_path / "a", "--service", " ", "--model", "models:/iris/1")
    replicas = run_task("deploy", tmp_path / "b", "--service", "s", "--model", "models:/iris/1", "--replicas", "0")

    assert "--service must not be empty" in empty.stderr
    assert "--replicas must be at least 1" in replicas.stderr
