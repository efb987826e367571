"""The LoRA fine-tune and its evaluation for real, in the `llm` environment, against the portal's MLflow API (uvicorn on
loopback) with a project token: params with the base model's SHA-256 and the dataset version's digest, the loss at
every step, the held-out loss before and after, the adapter as the run's model, a registered version whose
description is the card, and the base/tuned comparison as two runs with the same metrics. A few steps on a few
short rows: about as long as loading the model twice (the evaluation merges the adapter into the base it
scored). Skipped without `make llm-env`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from apps.accounts.services import create_token
from apps.models import artifacts
from apps.models.models import ModelVersion, Run
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.test_builtin_tasks import REPO, run_task, task_env
from tests.serving.factories import artifact_store  # noqa: F401 (fixture)
from tests.serving.llm import LLM_PYTHON, llm_env_missing

pytestmark = [pytest.mark.live]
TOPICS = REPO / "fixtures" / "apps" / "finetune-chat" / "data" / "topics.jsonl"
DIGEST = "ab" * 32  # a materialised dataset version's folder is named by its digest


@pytest.fixture(autouse=True)
def _needs_llm_env():
    if reason := llm_env_missing():
        pytest.skip(reason)


def run_llm_task(module: str, out: Path, *args: str, inputs: dict[str, Path] | None = None, **env: str):
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(LLM_PYTHON), "-m", f"apps.jobs.builtin_tasks.{module}", *args],
        cwd=out, env=task_env(out, inputs, OMP_NUM_THREADS="1", **env), capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip


def test_bf16_on_a_machine_without_a_gpu_fails_saying_so(tmp_path):
    done = run_llm_task("llm_lora_finetune", tmp_path / "out", "--dataset", str(TOPICS), "--precision", "bf16",
                        CUDA_VISIBLE_DEVICES="")  # fmt: skip

    assert done.returncode == 2
    assert "--precision bf16: this task has no GPU (CPU training is fp32); use fp32 or auto" in done.stderr


@pytest.mark.usefixtures("artifact_store")
def test_it_trains_tracks_registers_the_card_and_compares_with_the_base(live_asgi, tmp_path):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    env = {"MLFLOW_TRACKING_URI": live_asgi.url, "MLFLOW_TRACKING_TOKEN": raw, "MLFLOW_EXPERIMENT_NAME": "lora"}
    version_dir = tmp_path / "datasets" / DIGEST
    version_dir.mkdir(parents=True)
    (version_dir / "rows.jsonl").write_text("".join(TOPICS.read_text().splitlines(keepends=True)[:10]))

    tune = run_llm_task(
        "llm_lora_finetune", tmp_path / "tune", "--dataset", str(version_dir), "--max_steps", "3",
        "--batch_size", "2", "--max_length", "96", "--heldout_fraction", "0.2", "--learning_rate", "0.002", **env,
    )  # fmt: skip

    assert tune.returncode == 0, tune.stdout + tune.stderr
    tracked = json.loads((tmp_path / "tune" / "tracking.json").read_text())
    run = Run.objects.get(run_uuid=tracked["run_id"])
    assert (run.experiment.project, run.experiment.name, run.status) == (project, "lora", "FINISHED")
    params = {p.key: p.value for p in run.params.all()}
    assert params["base_model"] == "SmolLM2-135M-Instruct"
    assert re.fullmatch(r"[0-9a-f]{64}", params["base_model_sha256"])
    assert params["dataset_digest"] == DIGEST
    assert (params["method"], params["lora_r"], params["train_rows"], params["heldout_rows"]) == ("lora", "8", "8", "2")
    steps = list(run.metrics.filter(key="train_loss").order_by("step").values_list("step", flat=True))
    assert steps == [1, 2, 3]
    latest = {m.key: m.value for m in run.latest_metrics.all()}
    assert latest["eval_loss_after"] < latest["eval_loss_before"]
    assert latest["eval_perplexity_before"] > 1
    root = tracked["artifact_uri"].removeprefix("mlflow-artifacts:").strip("/")
    names = {entry["path"] for entry in artifacts.list_dir(f"{root}/model")}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= names

    register = run_task("model_register", tmp_path / "register", "--name", "topics-lora",
                        inputs={"tune": tmp_path / "tune"}, **env)  # fmt: skip
    assert register.returncode == 0, register.stderr
    version = ModelVersion.objects.get(registered_model__name="topics-lora", registered_model__project=project)
    card = version.description
    assert f"SHA-256 {params['base_model_sha256']}" in card
    assert f"dataset digest {DIGEST}" in card
    assert "8 training rows, 2 held out" in card
    assert "LoRA r=8, alpha=16" in card
    assert "3 optimiser steps" in card
    assert card == (tmp_path / "tune" / "model" / "README.md").read_text()

    evaluate = run_llm_task("llm_evaluate", tmp_path / "evaluate", "--max_new_tokens", "4",
                            "--format_regex", "Topic: .*", inputs={"tune": tmp_path / "tune"}, **env)  # fmt: skip
    assert evaluate.returncode == 0, evaluate.stdout + evaluate.stderr
    compared = json.loads((tmp_path / "evaluate" / "comparison.json").read_text())
    assert set(compared["metrics"]) == {"base", "tuned"}
    assert len(compared["answers"]) == 2
    assert "| metric | base | tuned |" in evaluate.stdout
    runs = {r.tags.get(key="portal.evaluation").value: r for r in Run.objects.filter(tags__key="portal.evaluation")}
    assert set(runs) == {"base", "tuned"}
    keys = [{m.key for m in r.latest_metrics.all()} for r in runs.values()]
    assert keys[0] == keys[1] == {"eval_loss", "eval_perplexity", "exact_match", "format_match"}
    assert (
        runs["tuned"].latest_metrics.get(key="eval_loss").value < runs["base"].latest_metrics.get(key="eval_loss").value
    )
