"""The version page's feature importance chart (apps/models/explanation.py): the run the explain template tagged the
version with (portal.explanation) holds feature_importance.json; its bars reach the page's chart data, most important
on top. No chart for an untagged version, a run of another project, or a table not of the template's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from apps.models.registry import set_model_version_tag
from tests.factories import model_version, tracking_run

TABLE = {
    "columns": ["feature", "importance", "std"],
    "data": [["petal_width", 0.31, 0.2], ["sepal_length", 0.02, 0.01]],
}
MARK = '<script id="explanation-chart-data" type="application/json">'


def put(artifact_store: Path, run, name: str, content: object) -> None:
    path = artifact_store / run.artifact_uri.removeprefix("mlflow-artifacts:").strip("/") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def page(client, user, version) -> str:
    client.force_login(user)
    url = reverse("models:version-detail", kwargs={"project": "project-a", "pk": version.pk})
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def explained(world, artifact_store):
    version = model_version(world.project_a, world.alice, model_name="iris")
    run = tracking_run(world.project_a, world.alice, name="explain")
    put(artifact_store, run, "feature_importance.json", TABLE)
    put(artifact_store, run, "explanation.json", {"method": "shap-tree", "rows": 120, "features": []})
    set_model_version_tag(version, "portal.explanation", run.run_uuid)
    return version, run


def test_the_page_charts_the_tagged_runs_importances(world, client, explained):
    version, run = explained
    html = page(client, world.alice, version)
    start = html.index(MARK) + len(MARK)
    chart = json.loads(html[start : html.index("</script>", start)])
    assert chart == {"features": ["sepal_length", "petal_width"], "importances": [0.02, 0.31], "method": "shap-tree"}
    assert 'id="explanation-chart"' in html
    assert "Mean absolute SHAP value of each feature on 120 rows" in html
    assert reverse("models:run-detail", kwargs={"project": "project-a", "pk": run.pk}) in html
    table = html.split('id="explanation"', 1)[1].split("</table>", 1)[0]
    assert "<td>petal_width</td><td>0.3100</td>" in table


def test_permutation_importance_is_described_as_such(world, client, explained, artifact_store):
    version, run = explained
    put(artifact_store, run, "explanation.json", {"method": "permutation", "rows": 50})
    html = page(client, world.alice, version)
    assert "Permutation importance on 50 rows" in html
    assert 'data-label-importance="accuracy drop"' in html


def test_no_chart_without_the_tag(world, client):
    html = page(client, world.alice, model_version(world.project_a, world.alice, model_name="plain"))
    assert "explanation-chart" not in html
    assert "explanation.js" not in html


@pytest.mark.parametrize(
    "table",
    [
        "not json",
        {"columns": ["variant", "accuracy"], "data": [["fp32", 1.0]]},
        {"columns": ["feature", "importance"], "data": [["a", "high"]]},
        {"columns": ["feature", "importance"], "data": [["a", True]]},
        {"columns": ["feature", "importance"], "data": "rows"},
        [1, 2],
    ],
)
def test_a_table_not_of_the_templates_shape_shows_no_chart(world, client, explained, artifact_store, table):
    version, run = explained
    put(artifact_store, run, "feature_importance.json", table)
    assert "explanation-chart" not in page(client, world.alice, version)


def test_a_run_of_another_project_or_an_unknown_run_shows_no_chart(world, client, explained, artifact_store):
    version, _run = explained
    other = tracking_run(world.project_b, world.charlie, name="elsewhere")
    put(artifact_store, other, "feature_importance.json", TABLE)
    set_model_version_tag(version, "portal.explanation", other.run_uuid)
    assert "explanation-chart" not in page(client, world.alice, version)
    set_model_version_tag(version, "portal.explanation", "f" * 32)
    assert "explanation-chart" not in page(client, world.alice, version)


def test_an_optimised_version_without_its_own_shows_its_sources_chart_saying_whose(world, client, explained):
    source, _run = explained
    onnx = model_version(world.project_a, world.alice, model_name="iris")
    set_model_version_tag(onnx, "portal.optimised_from", f"iris/{source.version}")

    html = page(client, world.alice, onnx)

    start = html.index(MARK) + len(MARK)
    assert json.loads(html[start : html.index("</script>", start)])["features"] == ["sepal_length", "petal_width"]
    source_url = reverse("models:version-detail", kwargs={"project": "project-a", "pk": source.pk})
    assert f'Computed on <a href="{source_url}">iris v{source.version}</a>, the version this one was optimised' in html
    assert 'id="explained-from"' not in page(client, world.alice, source)  # the source's own


def test_an_unrelated_version_does_not_borrow_a_chart(world, client, explained):
    other = model_version(world.project_a, world.alice, model_name="iris")  # no optimised_from tag
    assert "explanation-chart" not in page(client, world.alice, other)
