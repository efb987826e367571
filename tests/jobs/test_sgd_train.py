"""The sgd-train built-in: one epoch at a time on the upstream split, the held-out accuracy after every epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobs.test_builtin_tasks import Prepared, run_task


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """iris-load → data-split (stratified, 30 % test), once for the module."""
    root = tmp_path_factory.mktemp("iris")
    assert run_task("iris_load", root / "iris").returncode == 0
    done = run_task(
        "split", root / "split", "--test_size", "0.3", "--seed", "7", "--label_column", "species",
        inputs={"iris": root / "iris"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Prepared(root / "iris", root / "split", done.stdout)


def test_it_learns_iris_epoch_by_epoch_and_its_model_passes_the_evaluate_task(tmp_path: Path, split: Prepared):
    train, evaluate = tmp_path / "train", tmp_path / "evaluate"

    trained = run_task(
        "sgd_train", train, "--epochs", "6", "--alpha", "0.001", "--loss", "hinge", inputs={"split": split.split}
    )

    assert trained.returncode == 0, trained.stderr
    assert "tracking skipped: MLFLOW_TRACKING_URI is not set" in trained.stdout
    assert [line.split(":")[0] for line in trained.stdout.splitlines() if line.startswith("epoch")] == [
        f"epoch {n}" for n in range(1, 7)
    ]
    params = json.loads((train / "params.json").read_text())
    assert list(params["curve"]) == ["1", "2", "3", "4", "5", "6"]
    assert params["val_accuracy"] == params["curve"]["6"] > 0.8
    assert (params["hyperparameters"]["loss"], params["hyperparameters"]["alpha"]) == ("hinge", 0.001)
    assert params["features"] == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    evaluated = run_task("evaluate", evaluate, inputs={"train": train, "split": split.split})
    assert evaluated.returncode == 0, evaluated.stderr
    metrics = json.loads((evaluate / "metrics.json").read_text())
    assert metrics["accuracy"] == params["val_accuracy"]  # the same held-out rows, the same scaled model


def test_it_refuses_bad_settings_and_a_missing_validation_file(tmp_path: Path, split: Prepared):
    refused = run_task("sgd_train", tmp_path / "a", "--alpha", "0", inputs={"split": split.split})
    assert refused.returncode != 0
    assert "--alpha must be greater than 0" in refused.stderr + refused.stdout

    alone = tmp_path / "only-train"
    alone.mkdir()
    (alone / "train.csv").write_text((split.split / "train.csv").read_text())
    missing = run_task("sgd_train", tmp_path / "b", inputs={"only": alone})
    assert missing.returncode != 0
    assert "validation: no test.csv in the upstream outputs" in missing.stderr + missing.stdout


def test_it_keeps_training_when_the_tracking_server_is_unreachable(tmp_path: Path, split: Prepared):
    result = run_task(
        "sgd_train", tmp_path / "t", "--epochs", "2", inputs={"split": split.split},
        MLFLOW_TRACKING_URI="http://127.0.0.1:9", MLFLOW_TRACKING_TOKEN="x",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert "warning: tracking failed" in result.stdout
    assert (tmp_path / "t" / "model.joblib").is_file()
    assert not (tmp_path / "t" / "tracking.json").exists()
