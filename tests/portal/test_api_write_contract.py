"""The write contract every /api/v1 body shares (apps/projects/api/serializers.py, `StrictFieldsMixin`).

Operations are discovered from the OpenAPI schema: every write that documents a JSON body is sent a key that is
no field of it and must answer 400 naming that key, so an endpoint added later is covered the day it exists.
"""

from __future__ import annotations

import re

import pytest
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator

from apps.accounts.models import ApiToken
from apps.jobs.models import JobTemplate
from apps.projects.api.base import ProjectScopedGenericViewSet
from tests.access import PROJECT_OBJECT_MAKERS, USER_OBJECT_MAKERS, lookup_value
from tests.conftest import user_client

UNKNOWN = "zz_not_a_field"
WRITES = ("post", "put", "patch")


def json_body_operations() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if method in WRITES and "application/json" in content:
                found.append((path, method))
    return sorted(found)


OPERATIONS = json_body_operations()


def concrete_url(world, path: str) -> str:
    """The path with its placeholder filled by an object alice (owner of project-a, made staff) may write."""
    if "{" not in path:
        return path
    match = resolve(re.sub(r"\{[^}]+\}", "1", path))
    viewset = match.func.cls
    model = viewset.queryset.model if viewset.queryset is not None else viewset.serializer_class.Meta.model
    if issubclass(viewset, ProjectScopedGenericViewSet):
        obj = PROJECT_OBJECT_MAKERS[model](world.project_a, world.alice)
    else:
        obj = USER_OBJECT_MAKERS[model](world.alice)
    return re.sub(r"\{[^}]+\}", lookup_value(obj, viewset), path)


def test_operations_were_discovered():
    assert ("/api/v1/tokens/", "post") in OPERATIONS
    assert ("/api/v1/memberships/{id}/", "patch") in OPERATIONS


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=lambda v: v)
def test_every_json_write_refuses_an_unknown_field_by_name(world, path, method):
    world.alice.is_staff = True  # cluster writes are the platform admins'
    world.alice.save(update_fields=["is_staff"])
    url = concrete_url(world, path)

    response = getattr(user_client(world.alice), method)(url, {UNKNOWN: 1}, format="json")

    assert response.status_code == 400, (url, response.status_code, response.content)
    assert UNKNOWN in response.json(), response.json()
    assert "Unknown field" in response.json()[UNKNOWN][0]


def test_a_misspelt_token_option_is_refused_and_nothing_is_created(world):
    response = user_client(world.alice).post("/api/v1/tokens/", {"name": "ci", "expires_in_days": 1}, format="json")

    assert response.status_code == 400
    message = response.json()["expires_in_days"][0]
    assert "days" in message  # it says what the endpoint takes
    assert "name" in message
    assert not ApiToken.objects.filter(user=world.alice, name="ci").exists()


def test_unknown_fields_are_named_together_with_the_other_errors(world):
    response = user_client(world.alice).post("/api/v1/tokens/", {"expires_in_days": 1}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"name", "expires_in_days"}


def test_read_only_fields_are_known_so_a_body_read_with_get_can_be_sent_back(world):
    client = user_client(world.alice)
    body = client.get("/api/v1/projects/project-a/").json()

    response = client.put("/api/v1/projects/project-a/", {**body, "name": "Renamed"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["name"] == "Renamed"
    assert response.json()["created_at"] == body["created_at"]


def test_a_browsable_api_form_token_is_not_a_field(world):
    client = user_client(world.alice)
    response = client.post("/api/v1/tokens/", {"name": "form", "csrfmiddlewaretoken": "x"}, format="multipart")

    assert response.status_code == 201, response.content


@pytest.mark.parametrize("fmt", ["multipart", "json"])
def test_null_for_a_not_null_field_with_a_default_is_a_400_not_a_500(world, fmt):
    """Multipart's "null" parses to None in a JSON field without meeting its null check (it reached the
    NOT NULL column: a 500); every field that may not be null says so, whatever the body's format."""
    client = user_client(world.alice)
    body = {"project": "project-a", "slug": "nulls", "name": "Nulls", "env": "null" if fmt == "multipart" else None}

    response = client.post("/api/v1/templates/", body, format=fmt)

    assert response.status_code == 400, response.content
    assert response.json() == {"env": ["This field may not be null."]}
    assert not JobTemplate.objects.filter(slug="nulls").exists()


def test_omitted_fields_with_a_default_take_the_default(world):
    response = user_client(world.alice).post(
        "/api/v1/templates/", {"project": "project-a", "slug": "bare", "name": "Bare"}, format="multipart"
    )

    assert response.status_code == 201, response.content
    template = JobTemplate.objects.get(slug="bare")
    assert (template.env, template.command, template.resources, template.replicas) == ({}, [], {}, {})


def test_the_schema_says_request_bodies_take_no_other_keys(world):
    schema = user_client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    components = schema["components"]["schemas"]

    assert components["NewApiTokenRequest"]["additionalProperties"] is False
    assert components["PatchedMembershipUpdateRequest"]["additionalProperties"] is False
