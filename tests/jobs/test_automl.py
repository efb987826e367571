"""The automl task for real on CPU, within a few seconds' budget: on iris it compares several scikit-learn estimators
(the leaderboard, as a table), and the best one, refitted, classifies the held-out rows well; it reads a dataset
version or an upstream split. Bad arguments fail saying why. Tracking and registration: test_automl_pipeline.py."""

from __future__ import annotations

import json
import pickle  # nosec B403 (the model the task itself just wrote)
from pathlib import Path

import pytest

from tests.jobs.test_builtin_tasks import run_task


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset version folder holding the iris CSV (datasets/v1), and a data-split of it (split/)."""
    root = tmp_path_factory.mktemp("iris")
    assert run_task("iris_load", root / "iris").returncode == 0
    assert (
        run_task(
            "split", root / "split", "--seed", "1", "--label_column", "species", inputs={"iris": root / "iris"}
        ).returncode
        == 0
    )
    version = root / "datasets" / "v1"
    version.mkdir(parents=True)
    (version / "iris.csv").write_bytes((root / "iris" / "data.csv").read_bytes())
    return root


def test_on_iris_the_best_of_several_estimators_is_accurate(iris, tmp_path):
    out = tmp_path / "automl"

    done = run_task("automl", out, "--dataset", str(iris / "datasets" / "v1"), "--label_column", "species",
                    "--seed", "1", "--time_budget", "5",
                    "--estimators", "logistic_regression,knn,random_forest")  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads((out / "leaderboard.json").read_text())
    assert table["columns"] == ["rank", "trial", "estimator", "params", "cv_score", "cv_std", "seconds"]
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert {row["estimator"] for row in rows} == {"logistic_regression", "knn", "random_forest"}  # each tried
    assert [row["rank"] for row in rows] == list(range(1, len(rows) + 1))
    assert [row["cv_score"] for row in rows] == sorted((row["cv_score"] for row in rows), reverse=True)
    assert all(isinstance(json.loads(row["params"]), dict) and row["seconds"] >= 0 for row in rows)
    params = json.loads((out / "params.json").read_text())
    assert params["model"] == rows[0]["estimator"]
    assert params["cv_score"] == rows[0]["cv_score"] > 0.9
    assert params["test_accuracy"] > 0.9
    assert (params["train_rows"], params["test_rows"]) == (120, 30)  # stratified 80/20 of iris's 150 rows (seed 1)
    assert params["features"] == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    import joblib

    model = joblib.load(out / "model.joblib")
    assert list(model.predict([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]])) == ["setosa", "virginica"]
    assert "| rank | estimator | cv accuracy |" in done.stdout
    assert "tracking skipped: MLFLOW_TRACKING_URI is not set; nothing registered" in done.stdout


def test_it_reads_an_upstream_split_and_stops_at_max_trials(iris, tmp_path):
    out = tmp_path / "automl"

    done = run_task("automl", out, "--label_column", "species", "--metric", "f1_macro", "--time_budget", "30",
                    "--max_trials", "4", "--estimators", "logistic_regression,extra_trees",
                    inputs={"split": iris / "split"})  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads((out / "leaderboard.json").read_text())
    assert len(table["data"]) == 4
    assert {row[2] for row in table["data"]} == {"logistic_regression", "extra_trees"}
    params = json.loads((out / "params.json").read_text())
    assert params["metric"] == "f1_macro"
    assert params["test_f1_macro"] > 0.85
    assert "upstream split:" in done.stdout


def test_the_model_folder_is_an_mlflow_sklearn_model(iris, tmp_path):
    """What track() uploads: sklearn-train's MLflow folder, with the training columns as its signature."""
    import joblib

    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    out = tmp_path / "automl"
    done = run_task("automl", out, "--dataset", str(iris / "datasets" / "v1"), "--label_column", "species",
                    "--time_budget", "5", "--max_trials", "2", "--estimators", "knn")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    folder = mlflow_model_dir(joblib.load(out / "model.joblib"), tmp_path / "mlflow", ["a", "b", "c", "d"])
    mlmodel = json.loads((folder / "MLmodel").read_text())
    assert set(mlmodel["flavors"]) == {"python_function", "sklearn"}
    with (folder / "model.pkl").open("rb") as fh:
        assert pickle.load(fh).predict([[5.1, 3.5, 1.4, 0.2]])[0] == "setosa"  # nosec B301


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--label_column is required"),
        (["--label_column", "nope"], "label column 'nope' is not in the CSV header"),
        (["--label_column", "species", "--time_budget", "0"], "--time_budget must be more than 0 seconds, got 0"),
        (["--label_column", "species", "--metric", "rmse"], "--metric 'rmse' is unknown; use one of accuracy"),
        (["--label_column", "species", "--estimators", "xgboost"], "--estimators 'xgboost': use some of"),
        (["--label_column", "species", "--folds", "1"], "--folds must be at least 2, got 1"),
    ],
)
def test_bad_arguments_fail_saying_why(iris, tmp_path, args, message):
    done = run_task("automl", tmp_path / "o", "--dataset", str(iris / "datasets" / "v1"), *args)

    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "o" / "leaderboard.json").exists()


def test_without_a_dataset_or_upstream_split_it_says_so(tmp_path):
    done = run_task("automl", tmp_path / "o", "--label_column", "species")
    assert done.returncode == 2
    assert "--dataset (none given, and upstream train.csv): no upstream input" in done.stderr
