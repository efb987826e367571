"""The explain template end to end through a real local agent, on CPU: a pipeline loads the iris dataset, splits it,
trains and registers a random forest, then explains the registered version on the dataset version's rows. The
importances are logged to tracking (artifacts, a metric per feature), the version is tagged with that run and its page
shows the chart's data; an unknown version fails the task saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from apps.models.models import ModelVersion
from tests.jobs.conftest import assert_succeeded, onnx_python  # noqa: F401 (fixture: skips without the train environment)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

SPEC = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "nodes": [
        {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@1"}},
        {"name": "split", "template": "data-split", "depends_on": ["load"], "args": {"test_size": 0.3, "seed": 7}},
        {
            "name": "train",
            "template": "sklearn-train",
            "depends_on": ["split"],
            "args": {"label_column": "species", "model": "random_forest", "n_estimators": 30},
        },
        {"name": "register", "template": "model-register", "depends_on": ["train"], "args": {"name": "iris"}},
        {
            "name": "explain",
            "template": "explain",
            "depends_on": ["register"],
            "args": {"dataset": "iris@1", "max_rows": 100},
        },
    ],
}
UNKNOWN = {"nodes": [{"name": "explain", "template": "explain", "args": {"model": "models:/iris/9"}}]}


@pytest.mark.usefixtures("onnx_python")
def test_the_template_logs_the_importances_and_the_version_page_charts_them(client, iris_lab):
    owner, project = iris_lab.owner, iris_lab.project

    run = iris_lab.run("explain", SPEC)

    assert_succeeded(run)
    out = Path(run.tasks.filter(node="explain").latest("attempt").output_dir)
    found = json.loads((out / "explanation.json").read_text())
    assert found["rows"] == 100
    assert found["method"] in ("shap-tree", "permutation")  # shap-tree where the train environment has shap
    top = found["features"][0]["feature"]
    assert top in ("petal_length", "petal_width")
    version = ModelVersion.objects.get(registered_model__project=project, registered_model__name="iris", version=1)
    tags = {tag.key: tag.value for tag in version.tags.all()}
    tracked = version.registered_model.project.tracking_runs.get(run_uuid=tags["portal.explanation"])
    assert {t.key: t.value for t in tracked.tags.all()}["portal.explains"] == "iris/1"
    latest = {m.key: m.value for m in tracked.latest_metrics.all()}
    assert latest[f"importance_{top}"] == pytest.approx(found["features"][0]["importance"])
    from apps.models import artifacts

    root = tracked.artifact_uri.removeprefix("mlflow-artifacts:").strip("/")
    for name in ("explanation.json", "feature_importance.json"):
        handle = artifacts.open_file(f"{root}/{name}")
        assert handle is not None, name
        handle.close()

    client.force_login(owner)
    page = client.get(reverse("models:version-detail", kwargs={"project": "project-a", "pk": version.pk})).content
    page = page.decode()
    assert 'id="explanation-chart"' in page
    assert "js/explanation.js" in page
    start = page.index('<script id="explanation-chart-data" type="application/json">') + len(
        '<script id="explanation-chart-data" type="application/json">'
    )
    chart = json.loads(page[start : page.index("</script>", start)])
    assert chart["features"][-1] == top  # bottom-up: the most important bar on top
    assert sorted(chart["features"]) == ["petal_length", "petal_width", "sepal_length", "sepal_width"]
    assert chart["importances"] == sorted(chart["importances"])
    assert f"<td>{top}</td>" in page

    failed = iris_lab.run("explain-unknown", UNKNOWN, timeout=300)
    assert failed.status == "failed"
    task = failed.tasks.get(node="explain")
    logged = "".join(task.log_lines.values_list("text", flat=True)) + task.reason
    assert "--model models:/iris/9:" in logged
