"""Lists cost the same number of queries for 1 row as for 50: no N+1 in the project lists and pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.projects.models import Membership, Role
from tests.factories import ProjectFactory, UserFactory, add_member

ROWS = 50


def count_queries(get: Callable[[], object]) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = get()
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


def api_client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def add_projects(user, total: int) -> None:
    """Make `user` a member of `total` projects (with several roles and a second member in each)."""
    roles = list(Role)
    have = Membership.objects.filter(user=user).count()
    for i in range(have, total):
        owner = UserFactory(username=f"owner-{i}")
        project = ProjectFactory(owner=owner, slug=f"bulk-{i}", name=f"Bulk {i}", description=f"Project {i}")
        add_member(project, user, roles[i % 3])


def add_members(project, total: int) -> None:
    """Give `project` `total` members with mixed roles."""
    roles = list(Role)
    for i in range(project.memberships.count(), total):
        add_member(project, UserFactory(username=f"member-{i}"), roles[i % 4])


@pytest.fixture
def alone(db):
    """A user who owns one project, which has no other member."""
    user = UserFactory(username="solo")
    project = ProjectFactory(owner=user, slug="solo", name="Solo")
    return user, project


def assert_constant(get: Callable[[], object], grow: Callable[[], None], django_assert_max_num_queries) -> None:
    get()  # warm caches (content types, sessions) so the first measurement is not inflated
    one = count_queries(get)
    grow()
    with django_assert_max_num_queries(one):
        response = get()
    assert response.status_code == 200


def test_project_list_api_does_not_grow_with_projects(alone, django_assert_max_num_queries):
    user, _project = alone
    client = api_client(user)

    def get():
        return client.get("/api/v1/projects/")

    assert_constant(get, lambda: add_projects(user, ROWS), django_assert_max_num_queries)
    body = get().json()
    assert body["count"] == ROWS
    assert len(body["results"]) == ROWS
    assert {row["my_role"] for row in body["results"]} == {"owner", "admin", "editor", "viewer"}


def test_membership_list_api_does_not_grow_with_members(alone, django_assert_max_num_queries):
    user, project = alone
    client = api_client(user)

    def get():
        return client.get("/api/v1/memberships/", {"project": project.slug})

    assert_constant(get, lambda: add_members(project, ROWS), django_assert_max_num_queries)
    body = get().json()
    assert body["count"] == ROWS
    assert {row["project"] for row in body["results"]} == {"solo"}


def test_dashboard_does_not_grow_with_projects(alone, django_assert_max_num_queries):
    user, _project = alone
    client = page_client(user)

    def get():
        return client.get("/")

    assert_constant(get, lambda: add_projects(user, ROWS), django_assert_max_num_queries)
    response = get()
    assert len(response.context["memberships"]) == ROWS
    assert "Bulk 49" in response.content.decode()


def test_members_page_does_not_grow_with_members(alone, django_assert_max_num_queries):
    user, project = alone
    client = page_client(user)

    def get():
        return client.get(f"/p/{project.slug}/members/")

    assert_constant(get, lambda: add_members(project, ROWS), django_assert_max_num_queries)
    response = get()
    assert len(response.context["memberships"]) == ROWS
    assert "member-49@example.com" in response.content.decode()
