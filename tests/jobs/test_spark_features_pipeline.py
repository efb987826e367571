"""The spark-features template end to end through a real local agent (its sandbox included), on CPU: a pipeline
engineers features of the demo iris@1 with PySpark local[2], publishes them as a new dataset version, and the next node
splits the data.csv it wrote. The run records that it read iris@1 and wrote iris-features@1."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from apps.datasets.models import DatasetUsage, DatasetVersion
from tests.jobs.conftest import assert_succeeded

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

COLUMNS = ["petal_ratio", "sepal_length", "species_copy_setosa", "species_copy_versicolor", "species_copy_virginica",
           "species"]  # fmt: skip
SPEC = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "nodes": [
        {
            "name": "features",
            "template": "spark-features",
            "args": {
                "dataset": "iris@1",
                "derive": "petal_ratio = petal_length / petal_width\nspecies_copy = species",
                "standardize": "sepal_length",
                "one_hot": "species_copy",
                "select": ",".join(COLUMNS),
                "output_dataset": "iris-features",
                "message": "engineered by Spark",
            },
        },
        {"name": "split", "template": "data-split", "depends_on": ["features"], "args": {"test_size": 0.2}},
    ],
}


@pytest.mark.usefixtures("spark_python")
def test_the_pipeline_publishes_the_engineered_version_and_the_next_node_reads_it(iris_lab):
    project, iris = iris_lab.project, iris_lab.dataset

    run = iris_lab.run("spark", SPEC)

    assert_succeeded(run)
    task = run.tasks.filter(node="features").latest("attempt")
    with (Path(task.output_dir) / "data.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == COLUMNS
    assert len(rows) == 151
    version = DatasetVersion.objects.get(dataset__project=project, dataset__name="iris-features", number=1)
    assert list(version.files.values_list("path", flat=True)) == ["data.csv"]
    assert (version.task_run, version.pipeline_run, version.message) == (task, run, "engineered by Spark")
    usages = {(u.direction, u.version_id) for u in DatasetUsage.objects.filter(pipeline_run=run)}
    assert ("read", iris.versions.get(number=1).pk) in usages
    assert ("write", version.pk) in usages
    split = Path(run.tasks.filter(node="split").latest("attempt").output_dir)
    assert sum(1 for _ in (split / "test.csv").open()) - 1 == 30
