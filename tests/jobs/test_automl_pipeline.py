"""The automl template end to end through a real local agent, on CPU: a pipeline loads the iris dataset, splits it, runs
AutoML on the split for a few seconds, then explains and ONNX-optimises the version it registered (issue 28's "iris →
AutoML → explain → ONNX"). The leaderboard is logged to tracking (artifact, metrics), the best model is version 1 of
flavour sklearn, which the model server loads; a label column the CSV lacks fails the task saying so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from apps.models.models import ModelAlias, ModelVersion
from apps.serving.replicas import model_format
from tests.jobs.conftest import assert_succeeded, onnx_python  # noqa: F401 (fixture: skips without the train environment)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

SPEC = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "nodes": [
        {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@1"}},
        {
            "name": "split",
            "template": "data-split",
            "depends_on": ["load"],
            "args": {"test_size": 0.2, "seed": 1, "label_column": "species"},
        },
        {
            "name": "automl",
            "template": "automl",
            "depends_on": ["split"],
            "args": {
                "label_column": "species",
                "time_budget": 6,
                "estimators": "logistic_regression,knn,random_forest",
                "name": "iris-automl",
                "alias": "staging",
            },
        },
        {"name": "explain", "template": "explain", "depends_on": ["automl"], "args": {"dataset": "iris@1"}},
        {
            "name": "optimise",
            "template": "onnx-optimise",
            "depends_on": ["automl"],
            "args": {"dataset": "iris@1", "seed": 1, "latency_runs": 5, "max_accuracy_drop": 0.05},
        },
    ],
}
BAD = {
    "nodes": [
        {
            "name": "automl",
            "template": "automl",
            "args": {"dataset": "iris@1", "label_column": "kind", "time_budget": 5},
        }
    ]
}


@pytest.mark.usefixtures("onnx_python")
def test_the_template_registers_the_best_model_with_its_leaderboard(iris_lab):
    project = iris_lab.project

    run = iris_lab.run("automl", SPEC)

    assert_succeeded(run)
    out = Path(run.tasks.filter(node="automl").latest("attempt").output_dir)
    table = json.loads((out / "leaderboard.json").read_text())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert len({row["estimator"] for row in rows}) > 1
    params = json.loads((out / "params.json").read_text())
    assert params["test_accuracy"] > 0.9

    version = ModelVersion.objects.get(
        registered_model__project=project, registered_model__name="iris-automl", version=1
    )
    assert model_format(version.source) == "sklearn"
    assert ModelAlias.objects.get(registered_model=version.registered_model, alias="staging").model_version == version
    tracked = version.run
    assert {t.key: t.value for t in version.tags.all()}["portal.automl"] == tracked.run_uuid
    latest = {m.key: m.value for m in tracked.latest_metrics.all()}
    assert latest["best_cv_accuracy"] == pytest.approx(rows[0]["cv_score"])
    assert latest["test_accuracy"] == pytest.approx(params["test_accuracy"])
    assert latest["trials"] == len(rows)
    assert f"cv_accuracy_{rows[0]['estimator']}" in latest
    assert {p.key: p.value for p in tracked.params.all()}["best_estimator"] == rows[0]["estimator"]
    from apps.models import artifacts

    root = tracked.artifact_uri.removeprefix("mlflow-artifacts:").strip("/")
    for name in ("leaderboard.json", "model/MLmodel", "model/model.pkl"):
        handle = artifacts.open_file(f"{root}/{name}")
        assert handle is not None, name
        handle.close()
    from apps.serving.modelserver.loading import load

    predictor = load(out / "mlflow" / "model")  # the folder uploaded as the version: what the model server loads
    answer = predictor.run(np.asarray([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]), ["predict"])
    assert [str(v) for v in answer["predict"]] == ["setosa", "virginica"]

    explained = Path(run.tasks.filter(node="explain").latest("attempt").output_dir)
    assert json.loads((explained / "explanation.json").read_text())["model"] == "models:/iris-automl/1"
    assert {t.key: t.value for t in version.tags.all()}["portal.explanation"]
    optimised = ModelVersion.objects.get(registered_model=version.registered_model, version=2)
    assert model_format(optimised.source) == "onnx"
    assert {t.key: t.value for t in optimised.tags.all()}["portal.optimised_from"] == "iris-automl/1"

    failed = iris_lab.run("automl-bad", BAD, timeout=300)
    assert failed.status == "failed"
    task = failed.tasks.get(node="automl")
    logged = "".join(task.log_lines.values_list("text", flat=True)) + task.reason
    assert "label column 'kind' is not in the CSV header" in logged
