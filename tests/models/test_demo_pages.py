"""`manage.py demo`'s tracking part: real iris runs with histories, and iris-classifier@production; idempotent."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.models import demo
from apps.models.models import Experiment, LatestMetric, Metric, ModelAlias, Run


@pytest.fixture
def populated(world):
    demo.populate(world.project_a, world.alice)
    return demo.populate(world.project_a, world.alice)  # the second call changes nothing


def test_demo_logs_real_runs_and_an_aliased_version_once_and_its_pages_show_them(world, client, populated):
    experiment = Experiment.objects.get(project=world.project_a, name="iris-models")
    runs = Run.objects.filter(experiment=experiment)
    assert runs.count() == len(demo.RUNS) == 5
    assert set(runs.values_list("status", flat=True)) == {"FINISHED"}
    accuracies = dict(LatestMetric.objects.filter(run__in=runs, key="accuracy").values_list("run__name", "value"))
    assert all(0.8 <= a <= 1.0 for a in accuracies.values()), accuracies
    assert len(set(accuracies.values())) > 1 or len(accuracies) == 5
    forest = runs.get(name="forest-60x3")
    assert Metric.objects.filter(run=forest, key="accuracy").count() == 60
    assert forest.params.get(key="n_estimators").value == "60"
    assert forest.inputs.get().name == "iris"
    production = ModelAlias.objects.get(registered_model=populated, alias="production")
    assert production.model_version.run.experiment == experiment
    assert "## Intended use" in production.model_version.model_card
    assert populated.versions.count() == 1

    # Its pages, on the same data: the demo trains five models, the costliest setup of this folder, so once.
    client.force_login(world.alice)
    experiment = Experiment.objects.get(project=world.project_a, name="iris-models")
    html = client.get(
        reverse("models:experiment-detail", kwargs={"project": "project-a", "pk": experiment.pk}),
        {"order": "metrics.accuracy DESC"},
    ).content.decode()
    assert "5 matching runs" in html
    assert "mlp-16" in html
    version = ModelAlias.objects.get(alias="production").model_version
    run = version.run
    page = client.get(reverse("models:run-detail", kwargs={"project": "project-a", "pk": run.pk})).content.decode()
    assert "iris-classifier v1" in page
    browser = client.get(
        reverse("models:run-artifacts", kwargs={"project": "project-a", "pk": run.pk}), {"path": "model/MLmodel"}
    ).content.decode()
    assert "python_function" in browser
    listing = client.get(reverse("models:model-list", kwargs={"project": "project-a"})).content.decode()
    assert "@production → v1" in listing
