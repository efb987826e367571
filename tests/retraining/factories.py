"""Rows of continuous training for tests: a policy over a one-node pipeline, a dataset and a registered model, and
model versions whose tracking runs logged a metric."""

from __future__ import annotations

import time
from typing import Any

from apps.models import metrics as metric_store
from apps.models.models import ModelVersion
from apps.models.registry import create_model_version, set_alias
from apps.models.services import log_batch
from apps.retraining.models import RetrainPolicy
from apps.retraining.services import create_policy
from tests.factories import dataset, pipeline, registered_model, tracking_run

MODEL = "iris-classifier"


def version_with(project: Any, owner: Any, value: float | None, metric: str = "test_accuracy") -> ModelVersion:
    """A new version of MODEL whose tracking run logged `metric` = `value` (none when None)."""
    run = tracking_run(project, owner, name=f"train-{time.monotonic_ns()}")
    if value is not None:
        log_batch(run, metrics=[metric_store.Point(metric, value, int(time.time() * 1000), 0, False)])
    return create_model_version(registered_model(project, MODEL), source=f"runs:/{run.run_uuid}/model", run=run)


def champion(project: Any, owner: Any, value: float, alias: str = "production") -> ModelVersion:
    version = version_with(project, owner, value)
    set_alias(version.registered_model, alias, version.version)
    return version


def policy(project: Any, owner: Any, **values: Any) -> RetrainPolicy:
    nodes = [{"name": "load", "args": {"code": "pass"}}]
    name = f"retrain-{project.slug}"
    pipe = project.pipelines.filter(name=name).first() or pipeline(project, owner, nodes, name=name)
    ds = project.datasets.filter(name="iris").first() or dataset(project, owner, name="iris")
    settings = {
        "name": "iris-retrain", "pipeline": pipe, "dataset": ds, "registered_model": registered_model(project, MODEL),
        "alias": "production", "metric": "test_accuracy", "margin": 0.05, **values,
    }  # fmt: skip
    return create_policy(project, owner, **settings)
