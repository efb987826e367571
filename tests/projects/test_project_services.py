"""The project and membership workflows in apps/projects/services.py, called directly."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.accounts.models import Notification
from apps.projects import services
from apps.projects.models import Membership, Project, Quota, Role
from apps.projects.permissions import ALL_PERMISSIONS, ROLE_PERMISSIONS
from tests.factories import UserFactory, add_member


def role_of(project: Project, user) -> int | None:
    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


def held_perms(user, project: Project) -> set[str]:
    return {perm for perm in ALL_PERMISSIONS if user.has_perm(f"projects.{perm}", project)}


@pytest.fixture
def admin_user(world):
    user = UserFactory(username="dave")
    add_member(world.project_a, user, Role.ADMIN)
    return user


def membership(project: Project, user) -> Membership:
    return Membership.objects.get(project=project, user=user)


# --- create_project ---------------------------------------------------------------------------


def test_create_project_makes_the_creator_owner_with_a_quota_and_every_permission(db):
    user = UserFactory(username="erin")

    project = services.create_project(user, slug="vision", name="  Vision  ", description="Image models")

    project.refresh_from_db()
    assert (project.slug, project.name, project.description, project.created_by) == (
        "vision",
        "Vision",
        "Image models",
        user,
    )
    assert role_of(project, user) == Role.OWNER
    assert Quota.objects.filter(project=project).exists()
    assert project.quota.cpu_cores is None  # an empty quota means "no limit"
    assert held_perms(user, project) == ROLE_PERMISSIONS[Role.OWNER]
    assert user.has_perm("projects.delete_project", project)


def test_create_project_grants_nothing_to_other_users(world):
    project = services.create_project(world.alice, slug="vision", name="Vision")
    assert held_perms(world.bob, project) == set()


def test_create_project_rejects_a_duplicate_name_ignoring_case(world):
    with pytest.raises(ValidationError) as exc:
        services.create_project(world.charlie, slug="another", name="pROJECT a")
    assert exc.value.message_dict == {"name": ["A project with this name already exists."]}
    assert not Project.objects.filter(slug="another").exists()


def test_create_project_rejects_a_duplicate_slug(world):
    with pytest.raises(ValidationError) as exc:
        services.create_project(world.charlie, slug="project-a", name="Something else")
    assert exc.value.message_dict == {"slug": ["A project with this slug already exists."]}


@pytest.mark.parametrize("slug", ["Upper", "with space", "-leading", "trailing-", "under_score", "", "x" * 51])
def test_create_project_rejects_a_malformed_slug(world, slug):
    with pytest.raises(ValidationError) as exc:
        services.create_project(world.alice, slug=slug, name="Fine name")
    assert list(exc.value.message_dict) == ["slug"]
    assert "lowercase letters, digits and hyphens" in exc.value.message_dict["slug"][0]
    assert not Project.objects.filter(name="Fine name").exists()


@pytest.mark.parametrize("slug", ["new", "api", "admin"])
def test_create_project_rejects_a_reserved_slug(world, slug):
    with pytest.raises(ValidationError) as exc:
        services.create_project(world.alice, slug=slug, name="Fine name")
    assert list(exc.value.message_dict) == ["slug"]
    assert "reserved" in exc.value.message_dict["slug"][0]


def test_create_project_reports_slug_and_name_errors_together(world):
    with pytest.raises(ValidationError) as exc:
        services.create_project(world.alice, slug="new", name="   ")
    assert set(exc.value.message_dict) == {"slug", "name"}


def test_only_staff_may_create_projects_when_creation_is_restricted(world, settings):
    settings.PORTAL_ALLOW_PROJECT_CREATION = False
    with pytest.raises(PermissionDenied):
        services.create_project(world.bob, slug="bobs", name="Bob's")
    staff = UserFactory(username="staffer", is_staff=True)
    assert services.create_project(staff, slug="staffs", name="Staff's").slug == "staffs"


# --- update_project ---------------------------------------------------------------------------


def test_update_project_renames_and_keeps_its_own_name_available(world):
    services.update_project(world.project_a, name="project a", description="Same name, other case")
    world.project_a.refresh_from_db()
    assert (world.project_a.name, world.project_a.description) == ("project a", "Same name, other case")


def test_update_project_rejects_another_projects_name(world):
    with pytest.raises(ValidationError) as exc:
        services.update_project(world.project_a, name="PROJECT B")
    assert list(exc.value.message_dict) == ["name"]
    world.project_a.refresh_from_db()
    assert world.project_a.name == "Project A"


# --- invite_member ----------------------------------------------------------------------------


def test_invite_by_username_adds_the_member_with_the_roles_permissions(world):
    created = services.invite_member(world.project_a, world.alice, "charlie", Role.VIEWER)

    assert (created.project, created.user, created.role) == (world.project_a, world.charlie, Role.VIEWER)
    assert held_perms(world.charlie, world.project_a) == {"view_project"}


def test_invite_by_email_ignores_case(world):
    created = services.invite_member(world.project_a, world.alice, "  CHARLIE@Example.com ", Role.EDITOR)

    assert created.user == world.charlie
    assert role_of(world.project_a, world.charlie) == Role.EDITOR
    assert held_perms(world.charlie, world.project_a) == {"view_project", "contribute_project"}


def test_invite_notifies_the_invited_user(world):
    services.invite_member(world.project_a, world.alice, "charlie", Role.EDITOR)

    notification = Notification.objects.get(user=world.charlie)
    assert notification.message == "alice added you to Project A as Editor."
    assert notification.url == "/p/project-a/members/"
    assert notification.read_at is None
    assert not Notification.objects.filter(user=world.alice).exists()


@pytest.mark.parametrize("identifier", ["nobody", "nobody@example.com", "", "   "])
def test_invite_of_an_unknown_user_is_an_error_on_user(world, identifier):
    with pytest.raises(ValidationError) as exc:
        services.invite_member(world.project_a, world.alice, identifier, Role.VIEWER)
    assert list(exc.value.message_dict) == ["user"]
    assert "No active user" in exc.value.message_dict["user"][0]
    assert world.project_a.memberships.count() == 2


def test_invite_of_an_inactive_user_is_refused(world):
    UserFactory(username="gone", is_active=False)
    with pytest.raises(ValidationError) as exc:
        services.invite_member(world.project_a, world.alice, "gone", Role.VIEWER)
    assert list(exc.value.message_dict) == ["user"]


def test_invite_of_an_existing_member_is_refused_and_keeps_their_role(world):
    with pytest.raises(ValidationError) as exc:
        services.invite_member(world.project_a, world.alice, "bob", Role.VIEWER)
    assert exc.value.message_dict == {"user": ["bob is already a member of this project."]}
    assert role_of(world.project_a, world.bob) == Role.EDITOR
    assert not Notification.objects.filter(user=world.bob).exists()


def test_an_editor_cannot_invite(world):
    with pytest.raises(PermissionDenied):
        services.invite_member(world.project_a, world.bob, "charlie", Role.VIEWER)
    assert role_of(world.project_a, world.charlie) is None


def test_an_admin_can_invite_an_admin(world, admin_user):
    services.invite_member(world.project_a, admin_user, "charlie", Role.ADMIN)
    assert role_of(world.project_a, world.charlie) == Role.ADMIN


def test_an_admin_cannot_grant_the_owner_role(world, admin_user):
    with pytest.raises(PermissionDenied):
        services.invite_member(world.project_a, admin_user, "charlie", Role.OWNER)
    assert role_of(world.project_a, world.charlie) is None


def test_an_owner_can_invite_a_second_owner(world):
    services.invite_member(world.project_a, world.alice, "charlie", Role.OWNER)
    assert held_perms(world.charlie, world.project_a) == ROLE_PERMISSIONS[Role.OWNER]


# --- change_role ------------------------------------------------------------------------------


def test_change_role_replaces_the_permissions_and_notifies(world):
    services.change_role(membership(world.project_a, world.bob), world.alice, Role.ADMIN)

    assert role_of(world.project_a, world.bob) == Role.ADMIN
    assert held_perms(world.bob, world.project_a) == ROLE_PERMISSIONS[Role.ADMIN]
    assert Notification.objects.get(user=world.bob).message == "Your role in Project A is now Admin."


def test_demotion_removes_permissions(world):
    services.change_role(membership(world.project_a, world.bob), world.alice, Role.VIEWER)
    assert held_perms(world.bob, world.project_a) == {"view_project"}


def test_an_admin_cannot_promote_someone_to_owner(world, admin_user):
    with pytest.raises(PermissionDenied):
        services.change_role(membership(world.project_a, world.bob), admin_user, Role.OWNER)
    assert role_of(world.project_a, world.bob) == Role.EDITOR


def test_an_admin_cannot_change_an_owners_role(world, admin_user):
    with pytest.raises(PermissionDenied):
        services.change_role(membership(world.project_a, world.alice), admin_user, Role.VIEWER)
    assert role_of(world.project_a, world.alice) == Role.OWNER
    assert world.alice.has_perm("projects.delete_project", world.project_a)


def test_an_admin_cannot_remove_an_owner(world, admin_user):
    with pytest.raises(PermissionDenied):
        services.remove_member(membership(world.project_a, world.alice), admin_user)
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_the_last_owner_cannot_be_demoted(world):
    with pytest.raises(ValidationError) as exc:
        services.change_role(membership(world.project_a, world.alice), world.alice, Role.ADMIN)
    assert list(exc.value.message_dict) == ["role"]
    assert "at least one owner" in exc.value.message_dict["role"][0]
    assert role_of(world.project_a, world.alice) == Role.OWNER
    assert world.alice.has_perm("projects.transfer_project", world.project_a)


def test_an_owner_can_step_down_when_another_owner_remains(world):
    add_member(world.project_a, world.charlie, Role.OWNER)
    services.change_role(membership(world.project_a, world.alice), world.alice, Role.ADMIN)
    assert role_of(world.project_a, world.alice) == Role.ADMIN
    assert not world.alice.has_perm("projects.delete_project", world.project_a)
    assert not Notification.objects.filter(user=world.alice).exists()  # nobody is told about their own change


# --- remove_member / leave_project ------------------------------------------------------------


def test_remove_member_deletes_the_membership_and_its_permissions(world):
    services.remove_member(membership(world.project_a, world.bob), world.alice)
    assert role_of(world.project_a, world.bob) is None
    assert held_perms(world.bob, world.project_a) == set()


def test_the_last_owner_cannot_be_removed(world):
    with pytest.raises(ValidationError) as exc:
        services.remove_member(membership(world.project_a, world.alice), world.alice)
    assert list(exc.value.message_dict) == ["role"]
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_the_last_owner_cannot_leave(world):
    with pytest.raises(ValidationError) as exc:
        services.leave_project(world.project_a, world.alice)
    assert list(exc.value.message_dict) == ["role"]
    assert held_perms(world.alice, world.project_a) == ROLE_PERMISSIONS[Role.OWNER]


def test_a_member_can_leave_without_manage_permission(world):
    services.leave_project(world.project_a, world.bob)
    assert role_of(world.project_a, world.bob) is None
    assert not world.bob.has_perm("projects.view_project", world.project_a)


def test_an_owner_can_leave_when_another_owner_remains(world):
    add_member(world.project_a, world.charlie, Role.OWNER)
    services.leave_project(world.project_a, world.alice)
    assert role_of(world.project_a, world.alice) is None
    assert held_perms(world.alice, world.project_a) == set()


def test_leaving_a_project_you_are_not_in_is_an_error_on_user(world):
    with pytest.raises(ValidationError) as exc:
        services.leave_project(world.project_a, world.charlie)
    assert list(exc.value.message_dict) == ["user"]


# --- transfer_ownership -----------------------------------------------------------------------


def test_transfer_makes_the_member_owner_and_the_old_owner_admin(world):
    new_owner = services.transfer_ownership(world.project_a, world.alice, "bob")

    assert (new_owner.user, new_owner.role) == (world.bob, Role.OWNER)
    assert role_of(world.project_a, world.alice) == Role.ADMIN
    assert world.bob.has_perm("projects.delete_project", world.project_a)
    assert world.bob.has_perm("projects.transfer_project", world.project_a)
    assert not world.alice.has_perm("projects.delete_project", world.project_a)
    assert not world.alice.has_perm("projects.transfer_project", world.project_a)
    assert world.alice.has_perm("projects.manage_members", world.project_a)
    assert Notification.objects.get(user=world.bob).message == "You are now an owner of Project A."


def test_transfer_accepts_an_email(world):
    services.transfer_ownership(world.project_a, world.alice, "BOB@example.com")
    assert role_of(world.project_a, world.bob) == Role.OWNER


def test_transfer_to_a_non_member_is_refused(world):
    with pytest.raises(ValidationError) as exc:
        services.transfer_ownership(world.project_a, world.alice, "charlie")
    assert exc.value.message_dict == {"user": ["Ownership can only go to a member of the project."]}
    assert role_of(world.project_a, world.alice) == Role.OWNER
    assert role_of(world.project_a, world.charlie) is None
    assert not world.charlie.has_perm("projects.view_project", world.project_a)


def test_transfer_to_yourself_is_refused(world):
    with pytest.raises(ValidationError) as exc:
        services.transfer_ownership(world.project_a, world.alice, "alice")
    assert list(exc.value.message_dict) == ["user"]
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_only_an_owner_can_transfer(world, admin_user):
    with pytest.raises(PermissionDenied):
        services.transfer_ownership(world.project_a, admin_user, "bob")
    assert role_of(world.project_a, world.bob) == Role.EDITOR
    assert role_of(world.project_a, admin_user) == Role.ADMIN
