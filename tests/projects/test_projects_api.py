"""/api/v1/projects/: create, update, delete, transfer, leave, and what tokens narrow.

The generic who-gets-in matrix is in test_access_matrix.py; these tests check content and effects.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.services import create_token, revoke_token
from apps.projects.models import Membership, Project, Quota, Role
from tests.conftest import role_of, token_client, user_client
from tests.factories import UserFactory, add_member

LIST_URL = "/api/v1/projects/"


def detail_url(slug: str, action: str = "") -> str:
    return f"{LIST_URL}{slug}/" + (f"{action}/" if action else "")


# --- create -----------------------------------------------------------------------------------


def test_create_returns_the_project_with_the_creator_as_owner(world):
    response = user_client(world.bob).post(
        LIST_URL, {"slug": "vision", "name": "Vision", "description": "Image models"}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "vision"
    assert body["name"] == "Vision"
    assert body["description"] == "Image models"
    assert body["created_by"] == "bob"
    assert body["my_role"] == "owner"
    assert body["quota"] == {
        "cpu_cores": None,
        "memory_bytes": None,
        "gpus": None,
        "concurrent_runs": None,
        "concurrent_tasks": None,
        "storage_bytes": None,
    }
    project = Project.objects.get(slug="vision")
    assert role_of(project, world.bob) == Role.OWNER
    assert Quota.objects.filter(project=project).exists()
    assert world.bob.has_perm("projects.delete_project", project)


def test_create_keeps_the_runtime_and_notebook_idle_timeout(world):
    response = user_client(world.alice).post(
        LIST_URL,
        {"slug": "qa", "name": "QA", "runtime": "kubernetes", "notebook_idle_timeout": 45},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert (response.json()["runtime"], response.json()["notebook_idle_timeout"]) == ("kubernetes", 45)
    project = Project.objects.get(slug="qa")
    assert (project.runtime, project.notebook_idle_timeout) == ("kubernetes", 45)


def test_create_with_a_bad_idle_timeout_creates_nothing(world):
    response = user_client(world.alice).post(
        LIST_URL, {"slug": "qa", "name": "QA", "notebook_idle_timeout": 0}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["notebook_idle_timeout"]
    assert not Project.objects.filter(slug="qa").exists()


def test_a_created_project_appears_in_the_creators_list(world):
    client = user_client(world.charlie)
    client.post(LIST_URL, {"slug": "vision", "name": "Vision"}, format="json")

    rows = client.get(LIST_URL).json()["results"]
    assert {row["slug"]: row["my_role"] for row in rows} == {"project-b": "owner", "vision": "owner"}


@pytest.mark.parametrize("slug", ["Not A Slug", "-dash-first", "under_score"])
def test_create_with_an_invalid_slug_is_400_on_slug(world, slug):
    response = user_client(world.alice).post(LIST_URL, {"slug": slug, "name": "Fine"}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["slug"]
    assert "lowercase letters, digits and hyphens" in body["slug"][0]
    assert not Project.objects.filter(name="Fine").exists()


def test_create_with_a_reserved_slug_is_400_on_slug(world):
    response = user_client(world.alice).post(LIST_URL, {"slug": "new", "name": "Fine"}, format="json")
    assert response.status_code == 400
    assert "reserved" in response.json()["slug"][0]


def test_create_with_a_duplicate_name_is_400_on_name(world):
    response = user_client(world.charlie).post(LIST_URL, {"slug": "other", "name": "PROJECT A"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"name": ["A project with this name already exists."]}
    assert not Project.objects.filter(slug="other").exists()


def test_create_with_a_duplicate_slug_is_400_on_slug(world):
    response = user_client(world.charlie).post(LIST_URL, {"slug": "project-a", "name": "Other"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"slug": ["A project with this slug already exists."]}


def test_create_without_required_fields_lists_each_missing_field(world):
    response = user_client(world.alice).post(LIST_URL, {}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"slug", "name"}


def test_malformed_json_is_a_400_not_a_500(world):
    client = user_client(world.alice)
    response = client.post(LIST_URL, data='{"slug": "x", "name": ', content_type="application/json")

    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
    assert Project.objects.count() == 2


def test_malformed_json_on_update_is_a_400_not_a_500(world):
    response = user_client(world.alice).patch(detail_url("project-a"), data="{nope", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_a_json_list_body_is_a_400_not_a_500(world):
    response = user_client(world.alice).post(LIST_URL, data="[1, 2]", content_type="application/json")
    assert response.status_code == 400


# --- retrieve / update / delete ---------------------------------------------------------------


def test_retrieve_shows_my_role(world):
    body = user_client(world.bob).get(detail_url("project-a")).json()
    assert (body["slug"], body["name"], body["created_by"], body["my_role"]) == (
        "project-a",
        "Project A",
        "alice",
        "editor",
    )


def test_an_admin_can_rename_the_project(world):
    admin = UserFactory(username="dave")
    add_member(world.project_a, admin, Role.ADMIN)

    response = user_client(admin).patch(
        detail_url("project-a"), {"name": "Renamed", "description": "New"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["name"], response.json()["description"]) == ("Renamed", "New")
    world.project_a.refresh_from_db()
    assert (world.project_a.name, world.project_a.description) == ("Renamed", "New")


def test_rename_to_another_projects_name_is_400_on_name(world):
    response = user_client(world.alice).patch(detail_url("project-a"), {"name": "project b"}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["name"]
    world.project_a.refresh_from_db()
    assert world.project_a.name == "Project A"


def test_the_slug_cannot_be_changed(world):
    client = user_client(world.alice)
    response = client.patch(detail_url("project-a"), {"slug": "changed", "name": "Renamed"}, format="json")

    assert response.status_code == 200
    assert response.json()["slug"] == "project-a"
    assert response.json()["name"] == "Renamed"
    assert Project.objects.filter(slug="project-a", name="Renamed").exists()
    assert not Project.objects.filter(slug="changed").exists()
    assert client.get(detail_url("changed")).status_code == 404


def test_the_owner_deletes_the_project(world):
    project_pk = world.project_a.pk

    response = user_client(world.alice).delete(detail_url("project-a"))

    assert response.status_code == 204
    assert not Project.objects.filter(pk=project_pk).exists()
    assert not Membership.objects.filter(project_id=project_pk).exists()
    assert not Quota.objects.filter(project_id=project_pk).exists()


def test_an_admin_cannot_delete_the_project(world):
    admin = UserFactory(username="dave")
    add_member(world.project_a, admin, Role.ADMIN)

    response = user_client(admin).delete(detail_url("project-a"))

    assert response.status_code == 403
    assert Project.objects.filter(pk=world.project_a.pk).exists()


# --- transfer / leave -------------------------------------------------------------------------


def test_transfer_makes_the_member_owner_and_returns_their_membership(world):
    response = user_client(world.alice).post(detail_url("project-a", "transfer"), {"user": "bob"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["project"], body["user"], body["email"], body["role"]) == (
        "project-a",
        "bob",
        "bob@example.com",
        "owner",
    )
    assert role_of(world.project_a, world.bob) == Role.OWNER
    assert role_of(world.project_a, world.alice) == Role.ADMIN
    assert not world.alice.has_perm("projects.delete_project", world.project_a)


def test_transfer_to_a_non_member_is_400_on_user(world):
    response = user_client(world.alice).post(detail_url("project-a", "transfer"), {"user": "charlie"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"user": ["Ownership can only go to a member of the project."]}
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_transfer_without_a_user_is_400_on_user(world):
    response = user_client(world.alice).post(detail_url("project-a", "transfer"), {}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["user"]


def test_a_member_leaves_and_no_longer_sees_the_project(world):
    client = user_client(world.bob)

    response = client.post(detail_url("project-a", "leave"))

    assert response.status_code == 204
    assert role_of(world.project_a, world.bob) is None
    assert client.get(detail_url("project-a")).status_code == 404


def test_the_last_owner_cannot_leave(world):
    response = user_client(world.alice).post(detail_url("project-a", "leave"))

    assert response.status_code == 400
    assert list(response.json()) == ["role"]
    assert "at least one owner" in response.json()["role"][0]
    assert role_of(world.project_a, world.alice) == Role.OWNER


# --- tokens -----------------------------------------------------------------------------------


def test_a_read_token_can_list_but_not_create(world):
    client = token_client(world.alice, scope="read")

    listing = client.get(LIST_URL)
    assert listing.status_code == 200
    assert [row["slug"] for row in listing.json()["results"]] == ["project-a"]

    response = client.post(LIST_URL, {"slug": "vision", "name": "Vision"}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "This token is read-only."
    assert not Project.objects.filter(slug="vision").exists()


def test_a_read_token_cannot_update(world):
    response = token_client(world.alice, scope="read").patch(detail_url("project-a"), {"name": "X"}, format="json")
    assert response.status_code == 403
    world.project_a.refresh_from_db()
    assert world.project_a.name == "Project A"


def test_a_project_token_lists_only_its_project(world):
    add_member(world.project_b, world.alice, Role.VIEWER)
    assert user_client(world.alice).get(LIST_URL).json()["count"] == 2

    client = token_client(world.alice, project=world.project_a)

    response = client.get(LIST_URL)
    assert response.status_code == 200
    assert [row["slug"] for row in response.json()["results"]] == ["project-a"]
    assert client.get(detail_url("project-b")).status_code == 404


def test_a_project_token_cannot_create_projects(world):
    response = token_client(world.alice, project=world.project_a).post(
        LIST_URL, {"slug": "vision", "name": "Vision"}, format="json"
    )
    assert response.status_code == 403
    assert not Project.objects.filter(slug="vision").exists()


def test_a_write_token_can_create(world):
    response = token_client(world.alice).post(LIST_URL, {"slug": "vision", "name": "Vision"}, format="json")
    assert response.status_code == 201
    assert response.json()["created_by"] == "alice"


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_a_revoked_token_is_401(world):
    token, raw = create_token(world.alice, name="ci")
    assert bearer(raw).get(LIST_URL).status_code == 200
    revoke_token(token)

    response = bearer(raw).get(LIST_URL)

    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid, expired or revoked token."
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_expired_token_is_401(world):
    token, raw = create_token(world.alice, name="ci", days=1)
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save(update_fields=["expires_at"])

    response = bearer(raw).get(LIST_URL)

    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid, expired or revoked token."


def test_an_unknown_token_is_401(world):
    assert bearer("mlp_not-a-real-token").get(LIST_URL).status_code == 401
