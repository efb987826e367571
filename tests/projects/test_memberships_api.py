"""/api/v1/memberships/: invite, change role, remove. The role/404 matrix is in test_access_matrix.py."""

from __future__ import annotations

import pytest

from apps.accounts.models import Notification
from apps.projects.models import Membership, Role
from tests.conftest import role_of, user_client
from tests.factories import UserFactory, add_member

LIST_URL = "/api/v1/memberships/"


def detail_url(membership: Membership) -> str:
    return f"{LIST_URL}{membership.pk}/"


@pytest.fixture
def bob_membership(world) -> Membership:
    return Membership.objects.get(project=world.project_a, user=world.bob)


@pytest.fixture
def alice_membership(world) -> Membership:
    return Membership.objects.get(project=world.project_a, user=world.alice)


# --- list -------------------------------------------------------------------------------------


def test_list_filtered_by_project_shows_its_members_with_roles(world):
    response = user_client(world.bob).get(LIST_URL, {"project": "project-a"})

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["project"], r["user"], r["email"], r["role"]) for r in rows] == [
        ("project-a", "alice", "alice@example.com", "owner"),
        ("project-a", "bob", "bob@example.com", "editor"),
    ]


# --- invite -----------------------------------------------------------------------------------


def test_invite_by_username_returns_the_new_membership(world):
    response = user_client(world.alice).post(
        LIST_URL, {"project": "project-a", "user": "charlie", "role": "viewer"}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    membership = Membership.objects.get(project=world.project_a, user=world.charlie)
    assert body["id"] == membership.pk
    assert (body["project"], body["user"], body["email"], body["role"]) == (
        "project-a",
        "charlie",
        "charlie@example.com",
        "viewer",
    )
    assert body["created_at"]
    assert membership.role == Role.VIEWER
    assert world.charlie.has_perm("projects.view_project", world.project_a)
    assert Notification.objects.filter(user=world.charlie, message__contains="Project A").exists()


def test_invite_by_email_answers_with_the_username(world):
    response = user_client(world.alice).post(
        LIST_URL, {"project": "project-a", "user": "Charlie@Example.com", "role": "editor"}, format="json"
    )

    assert response.status_code == 201, response.content
    assert (response.json()["user"], response.json()["role"]) == ("charlie", "editor")
    assert role_of(world.project_a, world.charlie) == Role.EDITOR


def test_invite_of_an_unknown_username_is_400_on_user(world):
    response = user_client(world.alice).post(
        LIST_URL, {"project": "project-a", "user": "nobody", "role": "viewer"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"user": ["No active user with username or email “nobody”."]}
    assert world.project_a.memberships.count() == 2


def test_invite_of_an_existing_member_is_400_on_user(world):
    response = user_client(world.alice).post(
        LIST_URL, {"project": "project-a", "user": "bob", "role": "viewer"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"user": ["bob is already a member of this project."]}
    assert role_of(world.project_a, world.bob) == Role.EDITOR


@pytest.mark.parametrize("slug", ["no-such-project", "project-b"])
def test_invite_into_an_unknown_or_invisible_project_is_400_on_project(world, slug):
    response = user_client(world.alice).post(
        LIST_URL, {"project": slug, "user": "bob", "role": "viewer"}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["project"]
    assert response.json()["project"] == [f"No project “{slug}” that you can access."]
    assert not Membership.objects.filter(project__slug="project-b", user=world.bob).exists()


@pytest.mark.parametrize("role", ["boss", "", "40"])
def test_invite_with_an_invalid_role_is_400_on_role(world, role):
    response = user_client(world.alice).post(
        LIST_URL, {"project": "project-a", "user": "charlie", "role": role}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["role"]
    assert role_of(world.project_a, world.charlie) is None


def test_an_admin_cannot_invite_an_owner(world):
    admin = UserFactory(username="dave")
    add_member(world.project_a, admin, Role.ADMIN)

    response = user_client(admin).post(
        LIST_URL, {"project": "project-a", "user": "charlie", "role": "owner"}, format="json"
    )

    assert response.status_code == 403
    assert role_of(world.project_a, world.charlie) is None


# --- change role ------------------------------------------------------------------------------


def test_patch_changes_the_role_and_returns_the_whole_membership(world, bob_membership):
    response = user_client(world.alice).patch(detail_url(bob_membership), {"role": "admin"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["project"], body["user"], body["role"]) == (
        bob_membership.pk,
        "project-a",
        "bob",
        "admin",
    )
    assert role_of(world.project_a, world.bob) == Role.ADMIN
    assert world.bob.has_perm("projects.manage_members", world.project_a)


def test_patch_cannot_move_a_membership_to_another_user_or_project(world, bob_membership):
    response = user_client(world.alice).patch(
        detail_url(bob_membership), {"role": "viewer", "user": "charlie", "project": "project-b"}, format="json"
    )

    # Only the role changes: naming the user or project is refused by name (not silently ignored), and nothing
    # is changed.
    assert response.status_code == 400
    assert set(response.json()) == {"user", "project"}
    bob_membership.refresh_from_db()
    assert (bob_membership.user, bob_membership.project, bob_membership.role) == (
        world.bob,
        world.project_a,
        Role.EDITOR,
    )


def test_patch_with_an_invalid_role_is_400(world, bob_membership):
    response = user_client(world.alice).patch(detail_url(bob_membership), {"role": "root"}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["role"]
    assert role_of(world.project_a, world.bob) == Role.EDITOR


def test_an_admin_can_step_down_to_editor(world):
    admin = UserFactory(username="dave")
    own = add_member(world.project_a, admin, Role.ADMIN)

    response = user_client(admin).patch(detail_url(own), {"role": "editor"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["role"] == "editor"
    assert role_of(world.project_a, admin) == Role.EDITOR


def test_the_last_owner_cannot_demote_themself(world, alice_membership):
    response = user_client(world.alice).patch(detail_url(alice_membership), {"role": "admin"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["role"]
    assert role_of(world.project_a, world.alice) == Role.OWNER


# --- remove -----------------------------------------------------------------------------------


def test_delete_removes_the_member_and_their_access(world, bob_membership):
    response = user_client(world.alice).delete(detail_url(bob_membership))

    assert response.status_code == 204
    assert not Membership.objects.filter(pk=bob_membership.pk).exists()
    assert not world.bob.has_perm("projects.view_project", world.project_a)
    assert user_client(world.bob).get("/api/v1/projects/project-a/").status_code == 404


def test_a_viewer_can_remove_themself(world):
    viewer = UserFactory(username="erin")
    own = add_member(world.project_a, viewer, Role.VIEWER)

    response = user_client(viewer).delete(detail_url(own))

    assert response.status_code == 204
    assert role_of(world.project_a, viewer) is None


def test_a_viewer_cannot_remove_someone_else(world, bob_membership):
    viewer = UserFactory(username="erin")
    add_member(world.project_a, viewer, Role.VIEWER)

    assert user_client(viewer).delete(detail_url(bob_membership)).status_code == 403
    assert role_of(world.project_a, world.bob) == Role.EDITOR


def test_the_last_owner_cannot_be_removed(world, alice_membership):
    response = user_client(world.alice).delete(detail_url(alice_membership))

    assert response.status_code == 400
    assert list(response.json()) == ["role"]
    assert "at least one owner" in response.json()["role"][0]
    assert Membership.objects.filter(pk=alice_membership.pk, role=Role.OWNER).exists()


def test_an_owner_can_be_removed_by_another_owner(world, alice_membership):
    add_member(world.project_a, world.charlie, Role.OWNER)

    assert user_client(world.charlie).delete(detail_url(alice_membership)).status_code == 204
    assert role_of(world.project_a, world.alice) is None


def test_a_patch_without_a_role_changes_nothing(world, bob_membership):
    """An empty (multipart) PATCH was a 500 (KeyError 'role'): a partial update may omit every field."""
    for fmt in ("multipart", "json"):
        response = user_client(world.alice).patch(detail_url(bob_membership), {}, format=fmt)

        assert response.status_code == 200, response.content
        assert response.json()["role"] == "editor"
    assert role_of(world.project_a, world.bob) == Role.EDITOR
