"""Lists that scale (portal/lib/listing.py): the eight lists — datasets, pipelines, runs, experiments, models,
services, notebooks, tokens — search, sort and page on the page and on the API through one FilterSet each; a bad
value is a form error and a 400 (the API's with the field's message), never a 500; the number of queries does not
grow with the rows."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts.services import create_token
from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline
from apps.models.models import Experiment, RegisteredModel
from apps.projects.models import Project
from tests.conftest import user_client
from tests.projects.factories import NotebookFactory, PipelineRunFactory, ServiceFactory

PAGE = 25  # portal.lib.listing.PAGE_SIZE; the API's is 50


@dataclass
class List:
    page: str  # the page's path, {p} for the project's slug
    api: str
    make: Callable[[Project, object, str], None]  # a row named so
    name_of: Callable[[dict], str]  # an API row's name
    shown: str  # how a row's name appears on the page (a regex with {name})

    def page_url(self, project: Project) -> str:
        return self.page.format(p=project.slug)


def _pipeline(project, user, name):
    Pipeline.objects.create(project=project, name=name, spec={"nodes": []}, created_by=user)


def _run(project, user, name):
    PipelineRunFactory(project=project, pipeline_name=name, created_by=user)


def _token(project, user, name):
    create_token(user, name=name)


LISTS = {
    "datasets": List(
        "/p/{p}/datasets/",
        "/api/v1/datasets/",
        lambda project, user, name: Dataset.objects.create(project=project, name=name, created_by=user),
        lambda row: row["name"],
        r">{name}</a>",
    ),
    "pipelines": List("/p/{p}/pipelines/", "/api/v1/pipelines/", _pipeline, lambda row: row["name"], r">{name}</a>"),
    "runs": List("/p/{p}/runs/", "/api/v1/runs/", _run, lambda row: row["pipeline_name"], r">{name} #\d+</a>"),
    "experiments": List(
        "/p/{p}/experiments/",
        "/api/v1/experiments/",
        lambda project, user, name: Experiment.objects.create(project=project, name=name),
        lambda row: row["name"],
        r">{name}</a>",
    ),
    "models": List(
        "/p/{p}/models/",
        "/api/v1/registered-models/",
        lambda project, user, name: RegisteredModel.objects.create(project=project, name=name),
        lambda row: row["name"],
        r">{name}</a>",
    ),
    "services": List(
        "/p/{p}/services/",
        "/api/v1/services/",
        lambda project, user, name: ServiceFactory(project=project, name=name, created_by=user),
        lambda row: row["name"],
        r">{name}</a>",
    ),
    "notebooks": List(
        "/p/{p}/notebooks/",
        "/api/v1/notebooks/",
        lambda project, user, name: NotebookFactory(project=project, owner=user, name=name),
        lambda row: row["name"],
        r">{name}</a>",
    ),
    "tokens": List("/accounts/tokens/", "/api/v1/tokens/", _token, lambda row: row["name"], r"<td>{name}</td>"),
}
NAMES = ["alpha-one", "beta-two", "gamma-three", "alpha-four"]

pytestmark = pytest.mark.parametrize("kind", list(LISTS))


def names_on_page(html: str, spec: List, names: list[str]) -> list[str]:
    """The names of `names` the page shows, in the page's order."""
    found = []
    for name in names:
        match = re.search(spec.shown.format(name=re.escape(name)), html)
        if match:
            found.append((match.start(), name))
    return [name for _, name in sorted(found)]


@pytest.fixture
def filled(world, client):
    client.force_login(world.alice)
    return world


def fill(spec: List, world, names: list[str]) -> None:
    for name in names:
        spec.make(world.project_a, world.alice, name)


def test_search_narrows_the_page_and_the_api_alike(kind, filled, client):
    spec, world = LISTS[kind], filled
    fill(spec, world, NAMES)

    page = client.get(spec.page_url(world.project_a), {"search": "alpha"})
    api = user_client(world.alice).get(spec.api, {"search": "alpha", "project": world.project_a.slug})

    assert page.status_code == 200
    assert sorted(names_on_page(page.content.decode(), spec, NAMES)) == ["alpha-four", "alpha-one"]
    assert 'value="alpha"' in page.content.decode()  # the box keeps what was typed
    assert api.status_code == 200, api.content
    assert sorted(spec.name_of(row) for row in api.json()["results"]) == ["alpha-four", "alpha-one"]


def test_sorting_by_name_orders_the_page_and_the_api_alike(kind, filled, client):
    spec, world = LISTS[kind], filled
    fill(spec, world, NAMES)
    ordering = "-pipeline_name" if kind == "runs" else "-name"

    page = client.get(spec.page_url(world.project_a), {"ordering": ordering})
    api = user_client(world.alice).get(spec.api, {"ordering": ordering})

    expected = sorted(NAMES, reverse=True)
    assert page.status_code == 200
    assert names_on_page(page.content.decode(), spec, NAMES) == expected
    assert [spec.name_of(row) for row in api.json()["results"] if spec.name_of(row) in NAMES] == expected


def test_pages_keep_the_search_and_the_order(kind, filled, client):
    spec, world = LISTS[kind], filled
    names = [f"row-{i:02d}" for i in range(PAGE + 3)]
    fill(spec, world, names)
    ordering = "pipeline_name" if kind == "runs" else "name"

    first = client.get(spec.page_url(world.project_a), {"search": "row", "ordering": ordering})
    html = first.content.decode()
    next_link = re.search(r'rel="next" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    second = client.get(spec.page_url(world.project_a) + next_link)

    assert names_on_page(html, spec, names) == names[:PAGE]
    assert "search=row" in next_link
    assert f"ordering={ordering}" in next_link
    assert "page=2" in next_link
    assert names_on_page(second.content.decode(), spec, names) == names[PAGE:]
    assert f"{PAGE + 3} items" in html


def test_a_bad_sort_or_filter_is_a_400_with_the_fields_message(kind, filled, client):
    spec, world = LISTS[kind], filled
    fill(spec, world, NAMES[:1])

    page = client.get(spec.page_url(world.project_a), {"ordering": "password"})
    api = user_client(world.alice).get(spec.api, {"ordering": "password"})
    too_long = user_client(world.alice).get(spec.api, {"search": "x" * 300})

    assert page.status_code == 400
    assert page.context["listing"].form.errors["ordering"]
    assert 'data-field="ordering"' in page.content.decode()
    assert NAMES[0] not in page.content.decode()  # an invalid filter lists nothing rather than everything
    assert api.status_code == 400
    assert list(api.json()) == ["ordering"]
    assert "password" in api.json()["ordering"][0]
    assert too_long.status_code == 400
    assert list(too_long.json()) == ["search"]


def test_the_page_costs_the_same_queries_for_three_rows_as_for_thirty(
    kind, filled, client, django_assert_max_num_queries
):
    spec, world = LISTS[kind], filled
    fill(spec, world, [f"few-{i}" for i in range(3)])
    url = spec.page_url(world.project_a)
    client.get(url)  # warm caches (content types, the session) so the first measurement is not inflated
    with CaptureQueriesContext(connection) as few:
        assert client.get(url, {"search": "-"}).status_code == 200
    fill(spec, world, [f"many-{i}" for i in range(27)])

    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get(url, {"search": "-"})

    assert response.status_code == 200
    assert response.context["listing"].page.paginator.count == 30


def test_a_filters_empty_choice_names_the_filter(kind, filled, client):
    spec, world = LISTS[kind], filled

    html = client.get(spec.page_url(world.project_a)).content.decode()

    assert "---------" not in html
    if kind in ("notebooks", "services", "tokens"):  # a choice filter of the model's own (status, scope)
        assert re.search(r'<option value="" selected>(Status|Scope): any</option>', html)
