"""Detail pages whose lists grow with the project (bench/pages.py): a model's versions, a dataset's versions and an
experiment's runs cost the same number of queries for 2 rows as for 20, and the version tables show one page at a
time (newest first) with links to the others."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.datasets.models import DatasetVersion
from apps.models.models import LatestMetric, Param, RunTag
from apps.models.registry import create_model_version
from portal.lib.listing import PAGE_SIZE
from tests.factories import dataset, experiment, registered_model, tracking_run


@pytest.fixture
def signed_in(world, client):
    client.force_login(world.bob)  # a member (editor), not the owner
    return world


def add_model_versions(world, model, count: int) -> None:
    run = tracking_run(world.project_a, world.alice, name="source")
    for _ in range(count):
        create_model_version(model, source=f"runs:/{run.run_uuid}/model", run=run)


def add_dataset_versions(ds, count: int) -> None:
    start = DatasetVersion.objects.filter(dataset=ds).count()
    for number in range(start + 1, start + count + 1):
        DatasetVersion.objects.create(dataset=ds, number=number, digest=uuid.uuid4().hex, message=f"commit {number}")


def add_runs(world, count: int) -> None:
    for i in range(count):
        run = tracking_run(world.project_a, world.alice, name=f"run-{i}-{uuid.uuid4().hex[:6]}")
        Param.objects.create(run=run, key="lr", value="0.1")
        RunTag.objects.create(run=run, key="team", value="vision")
        LatestMetric.objects.create(run=run, key="loss", value=0.5, timestamp=1, step=0)


def queries_of(client, url: str) -> int:
    client.get(url)  # warm per-process caches (content types, the session) first
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_model_page_costs_the_same_queries_for_2_versions_as_for_20(signed_in, client, django_assert_num_queries):
    model = registered_model(signed_in.project_a, "iris")
    add_model_versions(signed_in, model, 2)
    url = reverse("models:model-detail", kwargs={"project": "project-a", "pk": model.pk})
    few = queries_of(client, url)
    add_model_versions(signed_in, model, 18)

    with django_assert_num_queries(few):
        response = client.get(url)

    assert response.status_code == 200
    assert len(response.context["versions"]) == 20


def test_the_model_page_shows_its_versions_a_page_at_a_time(signed_in, client):
    model = registered_model(signed_in.project_a, "iris")
    add_model_versions(signed_in, model, PAGE_SIZE + 2)
    url = reverse("models:model-detail", kwargs={"project": "project-a", "pk": model.pk})

    first = client.get(url)
    second = client.get(url, {"page": 2})

    assert [v.version for v in first.context["versions"]] == list(range(PAGE_SIZE + 2, 2, -1))
    assert [v.version for v in second.context["versions"]] == [2, 1]
    assert 'rel="next" href="?page=2"' in first.content.decode()
    assert f"{PAGE_SIZE + 2} items" in first.content.decode()
    # the alias form still offers every version, not only this page's
    assert "1" in [str(c[0]) for c in second.context["alias_form"].fields["version"].choices]


def test_the_dataset_page_costs_the_same_queries_for_2_versions_as_for_20(signed_in, client, django_assert_num_queries):
    ds = dataset(signed_in.project_a, signed_in.alice)
    add_dataset_versions(ds, 2)
    url = reverse("datasets:dataset-detail", kwargs={"project": "project-a", "pk": ds.pk})
    few = queries_of(client, url)
    add_dataset_versions(ds, 18)

    with django_assert_num_queries(few):
        response = client.get(url)

    assert response.status_code == 200
    assert len(response.context["versions"]) == 20


def test_the_dataset_page_shows_its_versions_a_page_at_a_time_and_the_latest_once(signed_in, client):
    ds = dataset(signed_in.project_a, signed_in.alice)
    add_dataset_versions(ds, PAGE_SIZE + 2)
    url = reverse("datasets:dataset-detail", kwargs={"project": "project-a", "pk": ds.pk})

    first = client.get(url)
    second = client.get(url, {"page": 2})

    assert [v.number for v in first.context["versions"]] == list(range(PAGE_SIZE + 2, 2, -1))
    assert [v.number for v in second.context["versions"]] == [2, 1]
    assert first.content.decode().count(">latest</span>") == 1
    assert ">latest</span>" not in second.content.decode()


def test_the_experiment_page_costs_the_same_queries_for_2_runs_as_for_20(signed_in, client, django_assert_num_queries):
    add_runs(signed_in, 2)
    url = reverse("models:experiment-detail", kwargs={"project": "project-a", "pk": experiment(signed_in.project_a).pk})
    few = queries_of(client, url)
    add_runs(signed_in, 18)

    with django_assert_num_queries(few):
        response = client.get(url)

    assert response.status_code == 200
    assert response.context["total_runs"] == 20
    assert response.context["rows"][0]["cells"] == ["0.5", "0.1"]


def test_the_experiment_page_counts_all_runs_while_a_filter_narrows_the_table(signed_in, client):
    add_runs(signed_in, 3)
    Param.objects.filter(run__name__startswith="run-0-").update(value="0.2")
    url = reverse("models:experiment-detail", kwargs={"project": "project-a", "pk": experiment(signed_in.project_a).pk})

    response = client.get(url, {"filter": "params.lr = '0.2'"})

    assert response.status_code == 200
    assert response.context["total_runs"] == 3
    assert len(response.context["rows"]) == 1
