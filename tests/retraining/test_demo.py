"""The demo's continuous training on iris: a policy of the iris pipeline (the new version into `load.dataset`, the
register node moving `challenger`, the evaluate node scoring the champion, the gate moving `staging`), a data monitor
of the iris dataset and two alert rules; made once, and nothing before the pipeline, dataset and model exist."""

from __future__ import annotations

import pytest

from apps.alerts import demo as alerts_demo
from apps.alerts.models import AlertRule
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.demo import iris_pipeline
from apps.retraining import demo
from apps.retraining.models import DataMonitor
from tests.factories import dataset, dataset_version, registered_model

pytestmark = pytest.mark.django_db


def test_the_demo_retrains_iris_once(world):
    project, alice = world.project_a, world.alice
    assert demo.populate(project, alice) is None
    load_builtin_templates()
    dataset_version(dataset(project, alice, name="iris"), {"iris.csv": b"sepal_length,species\n5.1,setosa\n"})
    registered_model(project, "iris-classifier")
    iris_pipeline(project, alice)
    alerts_demo.populate(project, alice)

    policy = demo.populate(project, alice)

    assert (policy.pipeline.name, policy.dataset.name, policy.registered_model.name) == (
        "iris",
        "iris",
        "iris-classifier",
    )
    assert (policy.alias, policy.metric, policy.dataset_argument) == ("staging", "test_accuracy", "load.dataset")
    assert policy.arguments == {"register": {"alias": "challenger"}, "evaluate": {"champion": "{champion}"}}
    assert policy.created_by == alice
    monitor = DataMonitor.objects.get(project=project)
    assert (monitor.policy, monitor.target_column, monitor.min_changed_percent) == (policy, "species", 10)
    kinds = dict(AlertRule.objects.filter(project=project).values_list("name", "kind"))
    assert kinds["iris-dataset-drift"] == "dataset_drift"
    assert kinds["iris-retrain-decision"] == "promotion_decision"
    assert demo.populate(project, alice) == policy
    assert DataMonitor.objects.count() == 1
