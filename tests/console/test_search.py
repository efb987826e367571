"""The global search box (navbar → /search/?q=, and its twin GET /api/v1/search/?q=): what it finds by name across
my projects, runs by number, nothing of a project I am not in (nor of another project through a project-limited
token), bad input as a form error or a 400 naming the field, and a query count that does not grow with the hits."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.jobs.models import PipelineRun
from tests.conftest import token_client, user_client
from tests.factories import ProjectFactory, dataset, registered_model
from tests.projects.factories import PipelineRunFactory, ServiceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(world):
    """Project A (alice's) holds iris things; project B (charlie's, alice not in it) holds an iris secret."""
    a, b = world.project_a, world.project_b
    dataset(a, world.alice, name="iris")
    registered_model(a, name="iris-classifier")
    ServiceFactory(project=a, name="iris-svc")
    PipelineRunFactory(project=a, pipeline_name="iris-train", number=3)
    PipelineRunFactory(project=a, pipeline_name="iris-train", number=4, status="failed")
    dataset(b, world.charlie, name="iris-secret")
    ServiceFactory(project=b, name="iris-secret-svc")
    PipelineRunFactory(project=b, pipeline_name="iris-secret", number=3)
    return world


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def names(groups, kind):
    return [hit["name"] for group in groups if group["kind"] == kind for hit in group["hits"]]


def test_the_page_lists_my_projects_objects_by_kind_with_links(objects):
    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "iris"})

    assert response.status_code == 200
    text = response.content.decode()
    groups = {g.kind: g for g in response.context["groups"]}
    assert [h.name for h in groups["datasets"].hits] == ["iris"]
    assert [h.name for h in groups["models"].hits] == ["iris-classifier"]
    assert [h.name for h in groups["services"].hits] == ["iris-svc"]
    assert [h.name for h in groups["runs"].hits] == ["iris-train #4", "iris-train #3"]  # newest first
    assert groups["runs"].hits[0].detail == "Failed"
    assert "secret" not in text  # project B's objects stay out of sight
    run = PipelineRun.objects.get(project=objects.project_a, number=3)
    assert f'href="{reverse("jobs:run-detail", kwargs={"project": "project-a", "pk": run.pk})}"' in text
    assert "Project A" in text  # each hit names its project


def test_a_run_is_found_by_its_number(objects):
    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "iris-train #3"})
    groups = {g.kind: g for g in response.context["groups"]}
    assert [h.name for h in groups["runs"].hits] == ["iris-train #3"]

    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "#4"})
    assert [h.name for h in {g.kind: g for g in response.context["groups"]}["runs"].hits] == ["iris-train #4"]


def test_projects_are_found_by_name_or_slug_and_only_mine(objects):
    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "project"})
    projects = {g.kind: g for g in response.context["groups"]}["projects"]
    assert [h.name for h in projects.hits] == ["Project A"]


def test_nothing_found_says_so_and_the_box_keeps_the_query(objects):
    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "zebra"})
    text = response.content.decode()
    assert "Nothing in your projects is named like “zebra”." in text
    assert 'value="zebra"' in text


def test_a_query_over_100_characters_is_a_form_error(objects):
    response = signed_in(objects.alice).get(reverse("projects:search"), {"q": "x" * 101})
    assert response.status_code == 400
    assert "at most 100 characters" in response.content.decode()


def test_the_page_asks_anonymous_visitors_to_sign_in(db):
    response = Client().get(reverse("projects:search"), {"q": "iris"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))


def test_the_navbar_has_the_search_box(objects):
    text = signed_in(objects.alice).get(reverse("projects:dashboard")).content.decode()
    assert f'action="{reverse("projects:search")}"' in text
    assert "data-global-search" in text


def test_the_api_twin_answers_the_same_groups(objects):
    response = user_client(objects.alice).get("/api/v1/search/", {"q": "iris"})
    assert response.status_code == 200
    body = response.json()
    assert body["query"] == "iris"
    assert [g["kind"] for g in body["groups"]] == ["projects", "pipelines", "runs", "datasets", "models", "services"]
    assert names(body["groups"], "datasets") == ["iris"]
    assert "iris-secret" not in str(body)


def test_the_api_names_the_field_of_a_bad_query(objects):
    client = user_client(objects.alice)
    assert client.get("/api/v1/search/").json() == {"q": ["This field is required."]}
    response = client.get("/api/v1/search/", {"q": "x" * 101})
    assert response.status_code == 400
    assert "q" in response.json()


def test_a_project_limited_token_searches_its_project_only(objects):
    other = ProjectFactory(owner=objects.alice, slug="other", name="Other")
    dataset(other, objects.alice, name="iris-other")
    everywhere = token_client(objects.alice)
    limited = token_client(objects.alice, project=objects.project_a)

    assert names(everywhere.get("/api/v1/search/", {"q": "iris"}).json()["groups"], "datasets") == [
        "iris",
        "iris-other",
    ]
    assert names(limited.get("/api/v1/search/", {"q": "iris"}).json()["groups"], "datasets") == ["iris"]


def test_queries_do_not_grow_with_the_hits(objects):
    client = signed_in(objects.alice)
    client.get(reverse("projects:search"), {"q": "iris"})  # warm the session and caches
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("projects:search"), {"q": "iris"})
    for number in range(10, 30):
        PipelineRunFactory(project=objects.project_a, pipeline_name="iris-train", number=number)
        dataset(objects.project_a, objects.alice, name=f"iris-{number}")
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("projects:search"), {"q": "iris"})
    groups = {g.kind: g for g in response.context["groups"]}
    assert len(groups["runs"].hits) == 8
    assert groups["runs"].more
    assert len(many.captured_queries) == len(few.captured_queries)


def test_each_kind_is_one_query_over_one_subquery_of_my_projects(objects):
    from apps.console.search import kinds, search

    with CaptureQueriesContext(connection) as captured:
        groups = search(objects.alice, "iris")

    assert [g.kind for g in groups] == [kind for kind, _label in kinds()]
    assert len(captured.captured_queries) == len(kinds())
    for query in captured.captured_queries:  # the visible projects' subquery once, not a query of it in a query
        assert query["sql"].count('FROM "projects_project"') <= 1, query["sql"]
