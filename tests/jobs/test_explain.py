"""The explain task for real on CPU: a random forest (SHAP TreeExplainer) and a logistic regression (SHAP's
model-agnostic permutation explainer) trained on iris rank a petal feature first, in the train environment (shap);
in the portal's own environment, which has no shap, the task falls back to permutation importance. Bad arguments fail
saying why. Tracking, the version tag and the version page: test_explain_pipeline.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobs.onnx_env import run_train_task
from tests.jobs.test_builtin_tasks import run_task

PETALS = {"petal_length", "petal_width"}


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset version folder holding the iris CSV, and models trained on its split next to it."""
    root = tmp_path_factory.mktemp("iris")
    assert run_task("iris_load", root / "iris").returncode == 0
    assert run_task("split", root / "split", "--seed", "7", inputs={"iris": root / "iris"}).returncode == 0
    for model in ("random_forest", "logistic_regression"):
        done = run_task("sklearn_train", root / model, "--model", model, "--n_estimators", "30",
                        inputs={"split": root / "split"})  # fmt: skip
        assert done.returncode == 0, done.stderr
    version = root / "datasets" / "v1"
    version.mkdir(parents=True)
    (version / "iris.csv").write_bytes((root / "iris" / "data.csv").read_bytes())
    return root


@pytest.fixture(scope="module")
def shap_python(onnx_python: str) -> str:
    import subprocess

    probe = subprocess.run([onnx_python, "-c", "import shap"], capture_output=True, check=False)  # nosec B603
    if probe.returncode != 0:
        pytest.skip("the 'train' task environment has no shap: run `make train-env`")
    return onnx_python


def explanation(out: Path) -> dict:
    return json.loads((out / "explanation.json").read_text())


@pytest.mark.parametrize(
    ("model", "method"), [("random_forest", "shap-tree"), ("logistic_regression", "shap-permutation")]
)
def test_shap_ranks_a_petal_feature_first(shap_python, iris, tmp_path, model, method):
    out = tmp_path / "explain"

    done = run_train_task(shap_python, "explain", out, "--model", str(iris / model), "--dataset",
                          str(iris / "datasets" / "v1"), "--max_rows", "60", "--background", "20")  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    found = explanation(out)
    assert found["method"] == method
    assert found["rows"] == 60  # bounded by --max_rows (iris has 150)
    assert found["fallback"] == ""
    features = found["features"]
    assert {f["feature"] for f in features} == {"sepal_length", "sepal_width", "petal_length", "petal_width"}
    assert features[0]["feature"] in PETALS
    assert all(f["importance"] >= 0 for f in features)
    assert [f["importance"] for f in features] == sorted((f["importance"] for f in features), reverse=True)
    table = json.loads((out / "feature_importance.json").read_text())
    assert table["columns"] == ["feature", "importance", "std"]
    assert [row[0] for row in table["data"]] == [f["feature"] for f in features]
    assert f"| {features[0]['feature']} |" in done.stdout
    assert "tracking skipped: MLFLOW_TRACKING_URI is not set" in done.stdout


@pytest.mark.parametrize("model", ["random_forest", "logistic_regression"])
def test_without_shap_it_falls_back_to_permutation_importance(iris, tmp_path, model):
    out = tmp_path / "explain"  # the portal's own environment: scikit-learn, no shap

    done = run_task("explain", out, "--model", str(iris / model), "--dataset", str(iris / "datasets" / "v1"))

    assert done.returncode == 0, done.stdout + done.stderr
    found = explanation(out)
    assert found["method"] == "permutation"
    assert "ModuleNotFoundError" in found["fallback"]
    assert "falling back to permutation importance" in done.stdout
    assert found["rows"] == 150
    assert found["features"][0]["feature"] in PETALS


def test_method_permutation_skips_shap(shap_python, iris, tmp_path):
    out = tmp_path / "explain"
    done = run_train_task(shap_python, "explain", out, "--model", str(iris / "random_forest"), "--dataset",
                          str(iris / "datasets" / "v1"), "--method", "permutation")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert explanation(out)["method"] == "permutation"
    assert explanation(out)["fallback"] == ""


def test_method_shap_fails_when_shap_is_missing(iris, tmp_path):
    done = run_task("explain", tmp_path / "o", "--model", str(iris / "random_forest"), "--dataset",
                    str(iris / "datasets" / "v1"), "--method", "shap")  # fmt: skip
    assert done.returncode == 1
    assert "--method shap: ModuleNotFoundError" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max_rows", "0"], "--max_rows must be at least 1, got 0"),
        (["--background", "0"], "--background must be at least 1"),
        (["--label_column", "nope"], "label column 'nope' is not in the CSV header"),
    ],
)
def test_bad_arguments_fail_saying_why(iris, tmp_path, args, message):
    done = run_task("explain", tmp_path / "o", "--model", str(iris / "random_forest"), "--dataset",
                    str(iris / "datasets" / "v1"), *args)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "o" / "explanation.json").exists()


def test_a_dataset_without_the_label_column_fails(iris, tmp_path):
    version = tmp_path / "nolabel"
    version.mkdir()
    lines = (iris / "iris" / "data.csv").read_text().splitlines()
    (version / "x.csv").write_text("\n".join(",".join(line.split(",")[:4]) for line in lines) + "\n")

    done = run_task("explain", tmp_path / "o", "--model", str(iris / "random_forest"), "--dataset", str(version))

    assert done.returncode == 2, done.stdout + done.stderr
    assert "--label_column" in done.stderr


def test_a_missing_model_fails(iris, tmp_path):
    done = run_task("explain", tmp_path / "o", "--model", str(tmp_path / "absent"), "--dataset",
                    str(iris / "datasets" / "v1"))  # fmt: skip
    assert done.returncode == 2
    assert "does not exist" in done.stderr
