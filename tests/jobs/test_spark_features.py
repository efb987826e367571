"""The spark-features task for real: PySpark local[2] in the "train" environment turns the iris dataset version into
derived, standardised and one-hot columns (skipped, saying why, without Java or pyspark). Bad arguments fail saying
which one, before Spark starts. Publishing a new dataset version through a real agent: test_spark_features_pipeline.py.
"""

from __future__ import annotations

import csv
from pathlib import Path
from statistics import mean

import pytest

from tests.jobs.onnx_env import run_train_task
from tests.jobs.test_builtin_tasks import run_task


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset version folder holding iris.csv, as the portal hands it to the task."""
    root = tmp_path_factory.mktemp("iris")
    assert run_task("iris_load", root / "load").returncode == 0
    version = root / "v1"
    version.mkdir()
    (version / "iris.csv").write_bytes((root / "load" / "data.csv").read_bytes())
    return version


FEATURES = [
    "--derive", "petal_ratio = petal_length / petal_width\nlong_sepal = CAST(sepal_length > 6 AS INT)",
    "--standardize", "sepal_length, petal_ratio",
    "--one_hot", "species",
    "--select", "sepal_length,petal_ratio,long_sepal,species_setosa,species_versicolor,species_virginica",
]  # fmt: skip


def rows_of(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_it_writes_the_engineered_columns(spark_python, iris, tmp_path):
    out = tmp_path / "features"

    done = run_train_task(spark_python, "spark_features", out, "--dataset", str(iris), *FEATURES)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header, rows = rows_of(out / "data.csv")
    assert header == ["sepal_length", "petal_ratio", "long_sepal", "species_setosa", "species_versicolor",
                      "species_virginica"]  # fmt: skip
    assert len(rows) == 150
    assert abs(mean(float(r["sepal_length"]) for r in rows)) < 1e-9  # standardised
    assert {r["long_sepal"] for r in rows} == {"0", "1"}
    assert [sum(int(r[f"species_{s}"]) for r in rows) for s in ("setosa", "versicolor", "virginica")] == [50] * 3
    assert all(sum(int(r[f"species_{s}"]) for s in ("setosa", "versicolor", "virginica")) == 1 for r in rows)
    assert "wrote data.csv: 150 rows" in done.stdout


def test_a_bad_expression_fails_naming_the_derivation(spark_python, iris, tmp_path):
    done = run_train_task(spark_python, "spark_features", tmp_path / "out", "--dataset", str(iris),
                          "--derive", "ratio = petal_length / no_such_column")  # fmt: skip

    assert done.returncode == 2
    assert "error: --derive ratio:" in done.stderr
    assert "no_such_column" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--standardize", "sepal_length,height"], "--standardize: no column height (columns: sepal_length,"),
        (["--one_hot", "colour"], "--one_hot: no column colour"),
        (["--derive", "petal_length * 2"], "--derive: 'petal_length * 2' is not 'name = expression'"),
        (["--derive", "2x = petal_length * 2"], "--derive: '2x' is not a column name"),
        (["--derive", "a = 1; a = 2"], "--derive: a is derived twice"),
        (["--select", "species,species"], "--select: species named twice"),
        (["--standardize", "species", "--one_hot", "species"], "--standardize and --one_hot both name species"),
        (["--master", "yarn"], "--master: 'yarn' is not local, local[N] or local[*]"),
        (["--file", "nope.csv"], "--file: nope.csv is not a file of the dataset version"),
    ],
)
def test_bad_arguments_fail_before_spark_starts(iris, tmp_path, args, message):
    # The portal's own environment has no pyspark: these fail on the arguments alone.
    done = run_task("spark_features", tmp_path / "out", "--dataset", str(iris), *args)

    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
