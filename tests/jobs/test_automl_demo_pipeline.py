"""The demo's "iris-automl" pipeline (issue 28: "iris → AutoML → explain → ONNX INT8 → serve") end to end through a
real local agent, on CPU: it runs green, registers the best model and its ONNX INT8 version, its deploy step leaves the
`iris-onnx` service serving that version (it answers an inference request through the router), and the version pages
show the optimisation table and the importance chart."""

from __future__ import annotations

import json

import httpx
import pytest
from django.urls import reverse

from apps.jobs import demo as jobs_demo
from apps.jobs.services import start_run
from apps.models.models import ModelVersion
from apps.serving.models import InferenceService, Revision
from apps.serving.replicas import model_format
from apps.serving.router.asgi import invalidate
from apps.serving.services import rollout
from tests.factories import make_token
from tests.jobs.conftest import assert_succeeded, drive, onnx_python  # noqa: F401 (fixture: skips without train env)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# the newest iris version's features: the four measures and petal_ratio (petal_length / petal_width)
ROWS = [[5.1, 3.5, 1.4, 0.2, 7.0], [6.7, 3.0, 5.2, 2.3, 2.2609]]
FEATURES = ["petal_length", "petal_ratio", "petal_width", "sepal_length", "sepal_width"]


def chart_of(page: str) -> dict:
    start = page.index('<script id="explanation-chart-data" type="application/json">')
    start = page.index(">", start) + 1
    return json.loads(page[start : page.index("</script>", start)])


@pytest.mark.usefixtures("onnx_python")
def test_the_demo_pipeline_serves_the_onnx_int8_version_and_its_pages_show_table_and_chart(iris_lab, live_asgi, client):
    owner, project = iris_lab.owner, iris_lab.project
    pipeline = jobs_demo.automl_pipeline(project, owner)
    assert jobs_demo.automl_pipeline(project, owner) == pipeline  # made once
    assert [n["name"] for n in pipeline.spec["nodes"]] == ["load", "split", "automl", "explain", "optimise", "serve"]

    # serving's reconcile is what beat runs every few seconds: it starts the replica and marks it ready
    run = drive(start_run(pipeline, owner), timeout=900, on_pass=rollout.reconcile)

    assert_succeeded(run)
    best = ModelVersion.objects.get(registered_model__project=project, registered_model__name="iris-automl", version=1)
    onnx = ModelVersion.objects.get(registered_model=best.registered_model, version=2)
    assert model_format(best.source) == "sklearn"
    assert model_format(onnx.source) == "onnx"
    tags = {t.key: t.value for t in onnx.tags.all()}
    assert (tags["portal.optimisation"], tags["portal.optimised_from"]) == ("int8", "iris-automl/1")

    service = InferenceService.objects.get(project=project, name=jobs_demo.AUTOML_SERVICE)
    assert service.status == InferenceService.Status.READY, service.reason
    revision = service.current_revision
    assert (revision.status, revision.model_version_id) == (Revision.Status.READY, onnx.pk)
    assert revision.config["model_format"] == "onnx"
    serve = run.tasks.filter(node="serve").latest("attempt")
    log = "".join(serve.log_lines.values_list("text", flat=True))
    assert f"serves revision {revision.number} at {service.base_path}" in log
    invalidate()
    headers = {"Authorization": f"Bearer {make_token(owner)}"}
    body = {"inputs": [{"name": "x", "shape": [2, 5], "datatype": "FP64", "data": [v for row in ROWS for v in row]}]}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=60) as http:
        answer = http.post(f"{service.base_path.rstrip('/')}/v2/models/{service.name}/infer", json=body)
    assert answer.status_code == 200, answer.text
    predicted = {o["name"]: o["data"] for o in answer.json()["outputs"]}["predict"]
    assert [str(p) for p in predicted] == ["setosa", "virginica"]

    client.force_login(owner)
    page = client.get(reverse("models:version-detail", kwargs={"project": project.slug, "pk": onnx.pk})).content
    page = page.decode()
    assert 'id="optimisation"' in page  # the table: original, fp32, int8
    for variant in ("original", "fp32", "int8"):
        assert f"<td>{variant}</td>" in page
    assert '<tr class="table-primary" aria-current="true"><td>int8</td>' in page
    assert 'id="explanation-chart"' in page  # the source's chart, saying whose
    assert 'id="explained-from"' in page
    chart = chart_of(page)
    assert sorted(chart["features"]) == FEATURES
    source = client.get(reverse("models:version-detail", kwargs={"project": project.slug, "pk": best.pk}))
    source = source.content.decode()
    assert 'id="explanation-chart"' in source
    assert 'id="explained-from"' not in source  # its own explanation
    assert chart_of(source) == chart
