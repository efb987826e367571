"""The experiment, runs table, run, artifact and compare pages render what tracking stored."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from apps.models import artifacts
from apps.models.metrics import make_point
from apps.models.models import Run
from apps.models.services import log_batch, update_run
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, experiment, tracking_run


def seeded_runs(project, owner, experiment_name: str = "iris") -> list:
    """rf-1 (acc 0.95), rf-2 (acc 0.80), lr-1 (acc 0.90, a history over 20 steps); all finished."""
    specs = [("rf-1", "rf", 0.95, "100"), ("rf-2", "rf", 0.80, "10"), ("lr-1", "lr", 0.90, "")]
    runs = []
    for index, (name, model, accuracy, trees) in enumerate(specs):
        run = tracking_run(
            project, owner, name=name, experiment_name=experiment_name, start_time=1_700_000_000_000 + index
        )
        points = [make_point("accuracy", accuracy * step / 19, 1_700_000_000_000 + step, step) for step in range(20)]
        params = [("model", model)] + ([("n_estimators", trees)] if trees else [])
        log_batch(
            run, metrics=points, params=params, tags=[("team", "=cmd|' /C calc'!A0" if name == "rf-2" else "vision")]
        )
        update_run(run, status="FINISHED", end_time=1_700_000_100_000)
        runs.append(run)
    return runs


@pytest.fixture
def runs(world):
    return seeded_runs(world.project_a, world.alice)


def table_url(run: Run, **params) -> str:
    from urllib.parse import urlencode

    url = reverse("models:experiment-detail", kwargs={"project": "project-a", "pk": run.experiment_id})
    return url + ("?" + urlencode(params, doseq=True) if params else "")


def run_names_in_order(html: str, names=("rf-1", "rf-2", "lr-1")) -> list[str]:
    body = html.split('id="runs"', 1)[1]
    return sorted(names, key=lambda n: body.index(f">{n}</a>"))


@pytest.mark.smoke
def test_experiment_list_shows_run_count_and_links(world, client, runs):
    experiment(world.project_a, "empty one")
    client.force_login(world.bob)
    html = client.get(reverse("models:experiment-list", kwargs={"project": "project-a"})).content.decode()
    assert "iris" in html
    assert "empty one" in html
    iris_row = html.split(">iris</a>", 1)[1].split("</tr>", 1)[0]
    assert "<td>3</td>" in iris_row
    assert table_url(runs[0]) in html


def test_experiment_list_empty_state(world, client):
    client.force_login(world.alice)
    html = client.get(reverse("models:experiment-list", kwargs={"project": "project-a"})).content.decode()
    assert "No experiments yet." in html
    assert "MLFLOW_TRACKING_URI" in html


def test_runs_table_shows_metric_and_param_columns(world, client, runs):
    client.force_login(world.alice)
    html = client.get(table_url(runs[0])).content.decode()
    assert "3 matching runs" in html
    assert ">accuracy" in html
    assert ">model" in html
    assert ">n_estimators" in html
    assert "0.95" in html
    assert "0.8" in html
    # the compare boxes point at the compare page
    assert reverse("models:run-compare", kwargs={"project": "project-a"}) in html
    assert f'name="run" value="{runs[0].pk}"' in html


def test_runs_table_filters_with_the_mlflow_grammar(world, client, runs):
    client.force_login(world.alice)
    html = client.get(table_url(runs[0], filter="metrics.accuracy > 0.85 and params.model = 'rf'")).content.decode()
    assert "1 matching run" in html
    assert ">rf-1</a>" in html
    assert ">rf-2</a>" not in html
    assert ">lr-1</a>" not in html


def test_a_bad_filter_shows_the_parsers_message_as_a_form_error(world, client, runs):
    client.force_login(world.alice)
    response = client.get(table_url(runs[0], filter="metrics.accuracy >> 1"))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="filter-errors"' in html
    assert "Error on parsing filter" in html
    assert "is-invalid" in html
    bad_entity = client.get(table_url(runs[0], filter="nonsense.x = 1")).content.decode()
    assert "Invalid entity type" in bad_entity


def test_a_bad_sort_or_page_is_a_form_error_not_a_500(world, client, runs):
    client.force_login(world.alice)
    assert client.get(table_url(runs[0], order="bogus stuff")).status_code == 400
    assert client.get(table_url(runs[0], order="attributes.nope DESC")).status_code == 400
    assert client.get(table_url(runs[0], page="x")).status_code == 400
    assert client.get(table_url(runs[0], page="999")).status_code == 200  # the last page


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("metrics.accuracy DESC", ["rf-1", "lr-1", "rf-2"]),
        ("metrics.accuracy ASC", ["rf-2", "lr-1", "rf-1"]),
        ("params.n_estimators ASC", ["rf-2", "rf-1", "lr-1"]),  # runs without the param last
        ("run_name ASC", ["lr-1", "rf-1", "rf-2"]),
    ],
)
def test_runs_table_sorts_server_side_by_any_column(world, client, runs, order, expected):
    client.force_login(world.alice)
    html = client.get(table_url(runs[0], order=order)).content.decode()
    assert run_names_in_order(html) == expected
    assert 'aria-sort="' in html


def test_column_chooser_is_remembered_in_the_query_string(world, client, runs):
    client.force_login(world.alice)
    html = client.get(table_url(runs[0], chosen="1", cols=["tags.team"])).content.decode()
    header = html.split('id="runs"', 1)[1].split("</thead>", 1)[0]
    assert ">team" in header
    assert ">accuracy" not in header
    assert "vision" in html
    # sort links keep the chosen columns
    assert "cols=tags.team" in header


def test_runs_table_pages(world, client, runs):
    for index in range(55):
        tracking_run(world.project_a, world.alice, name=f"extra-{index:02d}", experiment_name="iris")
    client.force_login(world.alice)
    html = client.get(table_url(runs[0], order="run_name ASC")).content.decode()
    assert "Page 1 of 2" in html
    second = client.get(table_url(runs[0], order="run_name ASC", page=2)).content.decode()
    assert ">rf-2</a>" in second
    assert ">extra-00</a>" not in second


def test_csv_export_follows_the_filter_and_sort(world, client, runs):
    client.force_login(world.alice)
    url = reverse("models:experiment-export", kwargs={"project": "project-a", "pk": runs[0].experiment_id})
    response = client.get(url, {"filter": "params.model = 'rf'", "order": "metrics.accuracy ASC",
                                "chosen": "1", "cols": ["metrics.accuracy", "params.model", "tags.team"]})  # fmt: skip
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="iris-runs.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["run_id", "run_name", "status", "start_time", "end_time", "user_id",
                       "metrics.accuracy", "params.model", "tags.team"]  # fmt: skip
    assert [r[1] for r in rows[1:]] == ["rf-2", "rf-1"]
    assert rows[1][6] == "0.8"
    assert rows[2][6] == "0.95"
    assert rows[1][8].startswith("'=")  # a formula is quoted, not run by a spreadsheet
    bad = client.get(url, {"filter": "metrics.accuracy >"})
    assert bad.status_code == 400
    assert "Error on parsing filter" in bad.content.decode()


def test_run_page_shows_info_params_tags_and_chart_series(world, client, runs):
    run = runs[0]
    client.force_login(world.bob)
    html = client.get(reverse("models:run-detail", kwargs={"project": "project-a", "pk": run.pk})).content.decode()
    assert run.run_uuid in html
    assert "Finished" in html
    assert ">n_estimators</td>" in html
    assert ">100</td>" in html
    assert ">team</td>" in html
    assert "vision" in html
    series = reverse("api:trackingrun-metric-series", kwargs={"run_uuid": run.run_uuid})
    assert f"{series}?key=accuracy&amp;points=500" in html
    assert "vendor/echarts/echarts.min.js" in html
    assert "No dataset inputs were logged." in html


def test_the_series_the_run_page_uses_is_downsampled(world, client, runs):
    run = runs[2]
    log_batch(run, metrics=[make_point("loss", 1 / (i + 1), 1, i) for i in range(1000)])
    client.force_login(world.alice)
    series = reverse("api:trackingrun-metric-series", kwargs={"run_uuid": run.run_uuid})
    data = client.get(series, {"key": "loss", "points": 500}).json()
    assert data["total"] == 1000
    assert len(data["steps"]) == 500
    assert data["steps"][0] == 0
    assert data["steps"][-1] == 999
    assert client.get(series, {"key": "loss"}, HTTP_ACCEPT="application/json").status_code == 200
    client.force_login(world.charlie)
    assert client.get(series, {"key": "loss"}).status_code == 404


def test_run_page_links_its_pipeline_run(world, client):
    from tests.access import make_run

    pipeline_run = make_run(world.project_a, world.alice)
    task = pipeline_run.tasks.create(node="train")
    run = tracking_run(world.project_a, world.alice, name="from-pipeline", source_task=task)
    client.force_login(world.alice)
    html = client.get(reverse("models:run-detail", kwargs={"project": "project-a", "pk": run.pk})).content.decode()
    assert reverse("jobs:run-detail", kwargs={"project": "project-a", "pk": pipeline_run.pk}) in html
    assert "<code>train</code>" in html


@pytest.fixture
def stored(runs):
    run = runs[0]
    base = run.artifact_uri.removeprefix("mlflow-artifacts:/")
    files = {
        "model/MLmodel": b"flavors:\n  sklearn: {}\n",
        "model/model.pkl": b"\x80\x04binary\x00",
        "metrics.json": b'{"a": 1, "b": [1, 2]}',
        "data/preds.csv": b"id,pred\n" + b"".join(f"{i},{i % 3}\n".encode() for i in range(100)),
        "plot.png": b"\x89PNG\r\n\x1a\nfake",
        "evil.svg": b"<svg onload=alert(1)>",
        "notes.txt": b"<script>alert(1)</script>",
    }
    for path, content in files.items():
        artifacts.save(f"{base}/{path}", io.BytesIO(content))
    return run


def artifacts_url(run, **params) -> str:
    from urllib.parse import urlencode

    url = reverse("models:run-artifacts", kwargs={"project": "project-a", "pk": run.pk})
    return url + ("?" + urlencode(params) if params else "")


def test_artifact_browser_lists_folders_and_sizes(world, client, stored):
    client.force_login(world.alice)
    html = client.get(artifacts_url(stored), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in html
    assert "model/" in html
    assert "data/" in html
    assert "metrics.json" in html
    assert "21\xa0bytes" in html  # metrics.json
    inside = client.get(artifacts_url(stored, path="model")).content.decode()
    assert "MLmodel" in inside
    assert "model.pkl" in inside
    assert "<html" in inside  # without htmx: a page of its own


def test_artifact_previews_text_json_csv_and_images(world, client, stored):
    client.force_login(world.alice)
    mlmodel = client.get(artifacts_url(stored, path="model/MLmodel"), HTTP_HX_REQUEST="true").content.decode()
    assert "sklearn: {}" in mlmodel
    pretty = client.get(artifacts_url(stored, path="metrics.json"), HTTP_HX_REQUEST="true").content.decode()
    assert "&quot;b&quot;: [\n    1," in pretty
    table = client.get(artifacts_url(stored, path="data/preds.csv"), HTTP_HX_REQUEST="true").content.decode()
    assert '<th scope="col">pred</th>' in table
    assert "First 20 rows." in table
    image = client.get(artifacts_url(stored, path="plot.png"), HTTP_HX_REQUEST="true").content.decode()
    assert "<img" in image
    assert "inline=1" in image
    text = client.get(artifacts_url(stored, path="notes.txt"), HTTP_HX_REQUEST="true").content.decode()
    assert "&lt;script&gt;" in text
    assert "<script>alert" not in text
    binary = client.get(artifacts_url(stored, path="model/model.pkl"), HTTP_HX_REQUEST="true").content.decode()
    assert "No preview" in binary


def test_a_json_artifact_nested_past_the_recursion_limit_is_shown_as_it_is(world, client, runs):
    run = runs[0]
    text = b"[" * 50_000 + b"]" * 50_000
    artifacts.save(f"{run.artifact_uri.removeprefix('mlflow-artifacts:/')}/deep.json", io.BytesIO(text))
    client.force_login(world.alice)

    response = client.get(artifacts_url(run, path="deep.json"), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert "[[[[[[" in response.content.decode()


def test_artifact_downloads_are_attachments_except_inline_images(world, client, stored):
    client.force_login(world.alice)
    url = reverse("models:run-artifact-download", kwargs={"project": "project-a", "pk": stored.pk})
    svg = client.get(url, {"path": "evil.svg", "inline": "1"})
    assert svg["Content-Disposition"].startswith("attachment")
    assert svg["Content-Type"] == "application/octet-stream"
    png = client.get(url, {"path": "plot.png", "inline": "1"})
    assert png["Content-Type"] == "image/png"
    assert png["Content-Disposition"].startswith("inline")
    assert b"".join(png.streaming_content).startswith(b"\x89PNG")


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "nope.txt", "a\\b"])
def test_artifact_paths_outside_or_missing_are_404(world, client, stored, path):
    client.force_login(world.alice)
    assert client.get(artifacts_url(stored, path=path)).status_code == 404
    url = reverse("models:run-artifact-download", kwargs={"project": "project-a", "pk": stored.pk})
    assert client.get(url, {"path": path}).status_code == 404


def test_compare_shows_param_diff_metrics_and_parallel_data(world, client, runs):
    client.force_login(world.alice)
    url = reverse("models:run-compare", kwargs={"project": "project-a"})
    html = client.get(url, {"run": [r.pk for r in runs]}).content.decode()
    diff = html.split('id="param-diff"', 1)[1].split("</table>", 1)[0]
    model_row = diff.split(">model", 1)[1].split("</tr>", 1)[0]
    assert "rf" in model_row
    assert "lr" in model_row
    assert 'class="table-warning differs"><th scope="row" class="fw-normal">model' in diff
    assert 'id="parallel-data"' in html
    assert '"params.model"' in html
    assert '"metrics.accuracy"' in html
    assert html.count("data-series=") == 1  # one chart: accuracy, with three series
    assert html.count("metric-series/?key=accuracy") == 3


def test_compare_needs_two_runs_and_ignores_other_projects_runs(world, client, runs):
    theirs = tracking_run(world.project_b, world.charlie, name="theirs")
    client.force_login(world.alice)
    url = reverse("models:run-compare", kwargs={"project": "project-a"})
    html = client.get(url, {"run": [runs[0].pk, theirs.pk, "x"]}).content.decode()
    assert 'id="compare-empty"' in html
    assert "theirs" not in html


def test_every_tracking_page_is_404_for_an_outsider(world, client, stored):
    client.force_login(world.charlie)
    kwargs = {"project": "project-a", "pk": stored.pk}
    exp = {"project": "project-a", "pk": stored.experiment_id}
    for url in [
        reverse("models:experiment-list", kwargs={"project": "project-a"}),
        reverse("models:experiment-detail", kwargs=exp),
        reverse("models:experiment-export", kwargs=exp),
        reverse("models:run-compare", kwargs={"project": "project-a"}) + f"?run={stored.pk}",
        reverse("models:run-detail", kwargs=kwargs),
        reverse("models:run-artifacts", kwargs=kwargs),
        reverse("models:run-artifact-download", kwargs=kwargs) + "?path=notes.txt",
    ]:
        assert client.get(url).status_code == 404, url
    # and charlie's own project does not reach A's objects by id
    other = {"project": "project-b", "pk": stored.pk}
    assert client.get(reverse("models:run-detail", kwargs=other)).status_code == 404


def test_a_viewer_sees_the_tracking_pages(world, client, runs):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert b"rf-1" in client.get(table_url(runs[0])).content
    url = reverse("models:run-detail", kwargs={"project": "project-a", "pk": runs[0].pk})
    assert client.get(url).status_code == 200
