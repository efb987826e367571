"""±Infinity and NaN metric values (MLflow accepts them) render everywhere: /api/v1 JSON, the MLflow API, the
pages and the charts' series. JSON has no such numbers, so they go out as the strings "NaN", "Infinity" and
"-Infinity" (what protobuf JSON and MLflow write, and what JavaScript's `Number()` reads)."""

from __future__ import annotations

import json
import math

import pytest
from django.urls import reverse

from apps.models.metrics import make_point
from apps.models.services import log_batch
from portal.lib.jsonsafe import dumps, finite
from tests.conftest import user_client
from tests.factories import tracking_run


@pytest.fixture
def runs(world) -> list:
    """`up` ends at +∞ (after finite points), `down` at -∞, `nan` at NaN."""
    made = []
    for name, last in (("up", math.inf), ("down", -math.inf), ("nan", math.nan)):
        run = tracking_run(world.project_a, world.alice, name=name, experiment_name="inf")
        points = [make_point("loss", 1.0 / (s + 1), 1000 + s, s) for s in range(10)]
        log_batch(run, metrics=[*points, make_point("loss", last, 2000, 10), make_point("other", last, 2000, 0)])
        made.append(run)
    return made


def test_the_api_lists_and_shows_runs_with_non_finite_values(world, runs):
    client = user_client(world.alice)
    response = client.get("/api/v1/tracking-runs/", {"experiment": runs[0].experiment_id})
    assert response.status_code == 200, response.content
    latest = {r["name"]: r["metrics"]["loss"]["value"] for r in response.json()["results"]}
    assert latest == {"up": "Infinity", "down": "-Infinity", "nan": "NaN"}
    detail = client.get(f"/api/v1/tracking-runs/{runs[0].run_uuid}/")
    assert detail.status_code == 200
    assert detail.json()["metrics"]["other"] == {"value": "Infinity", "step": 0, "timestamp": 2000}


def test_the_chart_series_leaves_out_what_a_chart_cannot_place(world, runs):
    client = user_client(world.alice)
    for run in runs:
        response = client.get(f"/api/v1/tracking-runs/{run.run_uuid}/metric-series/", {"key": "loss"})
        assert response.status_code == 200, response.content
        data = response.json()
        assert data["steps"] == list(range(10))
        assert data["values"] == pytest.approx([1.0 / (s + 1) for s in range(10)])
        assert data["total"] == 10
        only = client.get(f"/api/v1/tracking-runs/{run.run_uuid}/metric-series/", {"key": "other"}).json()
        assert (only["steps"], only["values"], only["total"]) == ([], [], 0)


def test_the_mlflow_api_writes_them_as_protobuf_json_does(world, runs):
    from tests.models.conftest import api_for

    api = api_for(world.alice, project=world.project_a)
    run = api.get("runs/get", run_id=runs[0].run_uuid).json()["run"]
    assert {m["key"]: m["value"] for m in run["data"]["metrics"]} == {"loss": "Infinity", "other": "Infinity"}
    found = api.post("runs/search", {"experiment_ids": [str(runs[0].experiment_id)], "filter": "metrics.loss > 5"})
    assert [r["info"]["run_name"] for r in found.json()["runs"]] == ["up"]
    history = api.get("metrics/get-history", run_id=runs[1].run_uuid, metric_key="loss").json()["metrics"]
    assert history[-1]["value"] == "-Infinity"
    bulk = api.get(
        "metrics/get-history-bulk-interval", run_ids=[r.run_uuid for r in runs], metric_key="other", max_results=10
    ).json()["metrics"]
    assert sorted(m["value"] for m in bulk) == ["-Infinity", "Infinity", "NaN"]


def test_the_pages_show_them(world, client, runs):
    client.force_login(world.alice)
    for run, shown in zip(runs, ("∞", "-∞", "NaN"), strict=True):
        response = client.get(reverse("models:run-detail", kwargs={"project": "project-a", "pk": run.pk}))
        assert response.status_code == 200
        table = response.content.decode().split('id="metrics"', 1)[1].split("</table>", 1)[0]
        assert f'<td class="font-monospace">{shown}</td>' in table
    experiment = {"project": "project-a", "pk": runs[0].experiment_id}
    table_page = client.get(reverse("models:experiment-detail", kwargs=experiment)).content.decode()
    assert all(shown in table_page for shown in ("∞", "-∞", "NaN"))
    compare = client.get(reverse("models:run-compare", kwargs={"project": "project-a"}), {"run": [r.pk for r in runs]})
    assert compare.status_code == 200
    html = compare.content.decode()
    diff = html.split('id="metric-diff"', 1)[1].split("</table>", 1)[0]
    loss_row = diff.split(">loss</th>", 1)[1].split("</tr>", 1)[0]
    assert loss_row.count('<td class="font-monospace">') == 3
    for shown in ("∞", "-∞", "NaN"):
        assert f'<td class="font-monospace">{shown}</td>' in loss_row
    parallel = json.loads(html.split('id="parallel-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert [r["values"] for r in parallel["runs"]] == [[None, None]] * 3  # a chart axis cannot place them
    export = client.get(reverse("models:experiment-export", kwargs=experiment))
    csv_text = b"".join(export.streaming_content).decode()
    assert all(shown in csv_text for shown in ("∞", "-∞", "NaN"))


def test_finite_replaces_non_finite_floats_anywhere_in_the_data():
    data = {"a": [1.0, math.inf, {"b": -math.inf, "c": (math.nan, "Infinity")}], "d": 2}
    assert finite(data) == {"a": [1.0, "Infinity", {"b": "-Infinity", "c": ["NaN", "Infinity"]}], "d": 2}
    assert json.loads(dumps(data)) == finite(data)
    assert dumps({"x": 1.5}) == json.dumps({"x": 1.5})
