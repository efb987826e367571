"""The evaluate task with --champion: the new model and the champion scored on the same test rows (real sklearn
models, real files), the champion's own feature columns respected, and a champion that cannot be scored leaving the
new model's evaluation intact."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.jobs.test_builtin_tasks import run_task


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """iris-load → data-split (stratified, 30 % test), once for the module: sklearn is slow to import."""
    root = tmp_path_factory.mktemp("split")
    assert run_task("iris_load", root / "iris").returncode == 0
    done = run_task("split", root / "split", "--test_size", "0.3", "--seed", "7", inputs={"iris": root / "iris"})
    assert done.returncode == 0, done.stderr
    return root / "split"


def weak_champion(folder: Path, split: Path) -> Path:
    """A depth-1 tree on petal_width alone (it can tell only two of the three classes apart), saved as the training
    task saves one: model.joblib with params.json naming its one feature column."""
    import joblib
    from sklearn.tree import DecisionTreeClassifier

    with (split / "train.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    tree = DecisionTreeClassifier(max_depth=1, random_state=0)
    tree.fit([[float(row["petal_width"])] for row in rows], [row["species"] for row in rows])
    folder.mkdir(parents=True)
    joblib.dump(tree, folder / "model.joblib")
    (folder / "params.json").write_text(json.dumps({"features": ["petal_width"], "label_column": "species"}))
    return folder


def accuracy_on(model_file: Path, test: Path, features: list[str]) -> float:
    import joblib
    from sklearn.metrics import accuracy_score

    with test.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    predicted = joblib.load(model_file).predict([[float(row[name]) for name in features] for row in rows])
    return float(accuracy_score([row["species"] for row in rows], [str(label) for label in predicted]))


def test_it_scores_the_new_model_and_the_champion_on_the_same_test_rows(tmp_path: Path, split: Path) -> None:
    train = tmp_path / "train"
    assert run_task("sklearn_train", train, inputs={"split": split}).returncode == 0
    champion = weak_champion(tmp_path / "champion", split)

    done = run_task("evaluate", tmp_path / "eval", "--champion", str(champion), inputs={"train": train, "split": split})

    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    test = split / "test.csv"
    features = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    assert metrics["accuracy"] == pytest.approx(accuracy_on(train / "model.joblib", test, features))
    scored = metrics["champion"]
    assert scored["rows"] == metrics["rows"] == 45  # the same rows
    assert scored["accuracy"] == pytest.approx(accuracy_on(champion / "model.joblib", test, ["petal_width"]))
    assert scored["accuracy"] < metrics["accuracy"]  # two classes of three: the comparison tells them apart
    assert {label: c["support"] for label, c in scored["per_class"].items()} == {
        label: c["support"] for label, c in metrics["per_class"].items()
    }
    assert (scored["model"], scored["version"]) == (str(champion / "model.joblib"), None)
    assert f"champion {champion / 'model.joblib'}: accuracy {scored['accuracy']:.4f}" in done.stdout


def test_without_a_champion_it_writes_what_it_always_wrote(tmp_path: Path, split: Path) -> None:
    train = tmp_path / "train"
    assert run_task("sklearn_train", train, inputs={"split": split}).returncode == 0

    done = run_task("evaluate", tmp_path / "eval", inputs={"train": train, "split": split})

    assert done.returncode == 0, done.stderr
    assert set(json.loads((tmp_path / "eval" / "metrics.json").read_text())) == {
        "accuracy", "f1_macro", "rows", "per_class"}  # fmt: skip
    assert "champion " not in done.stdout
    assert "warning" not in done.stdout


def test_a_champion_that_cannot_be_scored_is_a_warning_not_a_failure(tmp_path: Path, split: Path) -> None:
    train = tmp_path / "train"
    assert run_task("sklearn_train", train, inputs={"split": split}).returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.joblib").write_bytes(b"not a pickle")

    done = run_task("evaluate", tmp_path / "eval", "--champion", str(other), inputs={"train": train, "split": split})

    assert done.returncode == 0, done.stderr
    assert f"warning: the champion {other} was not scored" in done.stdout
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert "champion" not in metrics
    assert metrics["accuracy"] > 0.8
