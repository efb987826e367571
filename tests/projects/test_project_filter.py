"""`?project=<slug>` on every list of project-owned rows (apps/projects/filters.py, ProjectScopedFilterSet).

The list routes are discovered from the API router, so a list added later is checked the day it exists.
"""

from __future__ import annotations

import pytest

from apps.projects.filters import ProjectScopedFilterSet
from apps.projects.models import Role
from tests.access import PROJECT_OBJECT_MAKERS, lookup_value
from tests.conftest import user_client
from tests.factories import add_member
from tests.projects.test_access_matrix import PROJECT_CASES, call

LIST_CASES = [c for c in PROJECT_CASES if c.action == "list"]


def keys_of(response, case) -> set[str]:
    assert response.status_code == 200, response.content
    return {str(row.get(case.viewset.lookup_field, row.get("id"))) for row in response.json()["results"]}


@pytest.mark.parametrize("case", LIST_CASES, ids=str)
def test_every_project_list_has_a_filterset_with_the_project_filter(case):
    """One FilterSet per list (docs/apps.md), shared with its page; `?project=` comes from their common base."""
    assert issubclass(case.viewset.filterset_class, ProjectScopedFilterSet), case.viewset


def test_the_lists_were_discovered():
    names = {c.basename for c in LIST_CASES}
    assert {"pipeline", "run", "taskrun", "template", "schedule", "datasetversion", "experiment"} <= names
    assert {"registeredmodel", "modelversion", "image", "project", "membership", "notebook"} <= names


@pytest.mark.parametrize("case", LIST_CASES, ids=str)
def test_every_project_list_honours_the_project_filter(world, case):
    """alice sees both projects (owner of A, viewer of B): each slug gives that project's rows only."""
    add_member(world.project_b, world.alice, Role.VIEWER)
    ours = lookup_value(PROJECT_OBJECT_MAKERS[case.model](world.project_a, world.alice), case.viewset)
    theirs = lookup_value(PROJECT_OBJECT_MAKERS[case.model](world.project_b, world.charlie), case.viewset)
    client = user_client(world.alice)

    everything = keys_of(call(client, case), case)
    only_a = keys_of(client.get(f"/api/v1/{prefix(case)}/", {"project": world.project_a.slug}), case)
    only_b = keys_of(client.get(f"/api/v1/{prefix(case)}/", {"project": world.project_b.slug}), case)

    assert {ours, theirs} <= everything
    assert ours in only_a
    assert theirs not in only_a
    assert theirs in only_b
    assert ours not in only_b


@pytest.mark.parametrize("case", LIST_CASES, ids=str)
def test_a_project_you_cannot_see_lists_nothing(world, case):
    PROJECT_OBJECT_MAKERS[case.model](world.project_b, world.charlie)

    response = user_client(world.alice).get(f"/api/v1/{prefix(case)}/", {"project": world.project_b.slug})

    assert keys_of(response, case) == set()


def test_the_schema_documents_the_filter_on_each_list(world):
    schema = user_client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    for case in LIST_CASES:
        parameters = schema["paths"][f"/api/v1/{prefix(case)}/"]["get"]["parameters"]
        assert [p for p in parameters if p["name"] == "project" and p["in"] == "query"], case


def prefix(case) -> str:
    from portal.api import router

    return next(p for p, viewset, _b in router.registry if viewset is case.viewset)
