"""The project pages: dashboard, create, settings, delete, members (plain POST and htmx), transfer, leave.

Who may open which page is test_access_matrix.py's job; these tests check what the pages show and do.
"""

from __future__ import annotations

import pytest
from django.test import Client

from apps.projects.models import Membership, Project, Role
from tests.factories import ProjectFactory, UserFactory, add_member

HTMX = {"HTTP_HX_REQUEST": "true"}
PANEL = "projects/partials/members_panel.html"


def role_of(project: Project, user) -> int | None:
    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


def templates_used(response) -> list[str]:
    return [t.name for t in response.templates]


@pytest.fixture
def alice_client(world, client) -> Client:
    client.force_login(world.alice)
    return client


@pytest.fixture
def bob_membership(world) -> Membership:
    return Membership.objects.get(project=world.project_a, user=world.bob)


# --- dashboard --------------------------------------------------------------------------------


def test_dashboard_lists_my_projects_with_my_role_and_not_others(world, client):
    project_c = ProjectFactory(owner=world.charlie, slug="project-c", name="Project C", description="Shared work")
    add_member(project_c, world.bob, Role.VIEWER)
    client.force_login(world.bob)

    response = client.get("/")

    assert response.status_code == 200
    rows = [(m.project.slug, m.get_role_display(), m.member_count) for m in response.context["memberships"]]
    assert rows == [("project-a", "Editor", 2), ("project-c", "Viewer", 2)]
    html = response.content.decode()
    assert 'href="/p/project-a/"' in html
    assert "Project C" in html
    assert "Shared work" in html
    assert "Editor" in html
    assert "Viewer" in html
    assert "Project B" not in html
    assert "/p/project-b/" not in html


def test_dashboard_without_projects_invites_to_create_one(db, client):
    client.force_login(UserFactory(username="newcomer"))
    response = client.get("/")
    assert "You are not a member of any project yet." in response.content.decode()


def test_dashboard_requires_login(db, client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


# --- create -----------------------------------------------------------------------------------


def test_create_form_renders(world, alice_client):
    response = alice_client.get("/p/new/")
    assert response.status_code == 200
    assert 'name="slug"' in response.content.decode()


def test_create_project_redirects_to_its_overview(world, alice_client):
    response = alice_client.post("/p/new/", {"name": "Vision", "slug": "vision", "description": "Image models"})

    assert response.status_code == 302
    assert response["Location"] == "/p/vision/"
    project = Project.objects.get(slug="vision")
    assert (project.name, project.description) == ("Vision", "Image models")
    assert role_of(project, world.alice) == Role.OWNER

    overview = alice_client.get(response["Location"])
    html = overview.content.decode()
    assert "Project “Vision” created." in html
    assert "Image models" in html
    assert "Owner" in html


@pytest.mark.parametrize(
    ("slug", "message"),
    [
        ("Not A Slug", "Use 1–50 lowercase letters, digits and hyphens"),
        ("new", "“new” is reserved; choose another slug."),
        ("project-a", "A project with this slug already exists."),
    ],
)
def test_create_with_a_bad_slug_shows_the_error_and_creates_nothing(world, alice_client, slug, message):
    response = alice_client.post("/p/new/", {"name": "Fresh", "slug": slug})

    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["form"].errors["slug"]
    assert not Project.objects.filter(name="Fresh").exists()


def test_create_with_a_duplicate_name_shows_the_error_and_creates_nothing(world, alice_client):
    response = alice_client.post("/p/new/", {"name": "project b", "slug": "fresh"})

    assert response.status_code == 400
    assert "A project with this name already exists." in response.content.decode()
    assert not Project.objects.filter(slug="fresh").exists()


# --- settings and delete ----------------------------------------------------------------------


def test_settings_form_saves_name_and_description(world, alice_client):
    response = alice_client.post("/p/project-a/settings/", {"name": "Renamed", "description": "About"})

    assert response.status_code == 302
    assert response["Location"] == "/p/project-a/"
    world.project_a.refresh_from_db()
    assert (world.project_a.name, world.project_a.description, world.project_a.slug) == (
        "Renamed",
        "About",
        "project-a",
    )
    assert "Settings saved." in alice_client.get(response["Location"]).content.decode()


def test_settings_form_rejects_another_projects_name(world, alice_client):
    response = alice_client.post("/p/project-a/settings/", {"name": "PROJECT B", "description": ""})

    assert response.status_code == 400
    html = response.content.decode()
    assert "A project with this name already exists." in html
    assert "Constraint" not in html
    assert '<h1 class="h3">Project A</h1>' in html  # the header shows the saved name, not the rejected one
    assert 'value="PROJECT B"' in html  # the field keeps what was typed
    world.project_a.refresh_from_db()
    assert world.project_a.name == "Project A"


def test_settings_form_starts_with_the_current_values(world, alice_client):
    world.project_a.description = "About A"
    world.project_a.save()
    form = alice_client.get("/p/project-a/settings/").context["form"]
    assert form["name"].value() == "Project A"
    assert form["description"].value() == "About A"


def test_settings_shows_the_danger_zone_to_owners_only(world, client):
    admin = UserFactory(username="dave")
    add_member(world.project_a, admin, Role.ADMIN)
    client.force_login(admin)
    assert "/p/project-a/delete/" not in client.get("/p/project-a/settings/").content.decode()
    client.force_login(world.alice)
    assert "/p/project-a/delete/" in client.get("/p/project-a/settings/").content.decode()


def test_delete_page_asks_for_the_slug(world, alice_client):
    html = alice_client.get("/p/project-a/delete/").content.decode()
    assert "<code>project-a</code>" in html


def test_delete_with_the_wrong_confirmation_keeps_the_project(world, alice_client):
    response = alice_client.post("/p/project-a/delete/", {"confirm": "Project A"})

    assert response.status_code == 400
    assert "Type the project&#x27;s slug to confirm." in response.content.decode()
    assert Project.objects.filter(pk=world.project_a.pk).exists()


def test_delete_with_the_slug_removes_the_project(world, alice_client):
    pk = world.project_a.pk

    response = alice_client.post("/p/project-a/delete/", {"confirm": "project-a"})

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert not Project.objects.filter(pk=pk).exists()
    assert not Membership.objects.filter(project_id=pk).exists()
    assert "Project “Project A” deleted." in alice_client.get("/").content.decode()


# --- members ----------------------------------------------------------------------------------


def test_members_page_lists_members_with_emails_and_roles(world, alice_client):
    response = alice_client.get("/p/project-a/members/")

    assert response.status_code == 200
    rows = [(m.user.username, m.role) for m in response.context["memberships"]]
    assert rows == [("alice", Role.OWNER), ("bob", Role.EDITOR)]
    html = response.content.decode()
    assert "alice@example.com" in html
    assert "bob@example.com" in html
    assert "charlie" not in html
    assert "Transfer ownership" in html  # alice is an owner


def test_members_page_is_read_only_for_an_editor(world, client):
    client.force_login(world.bob)
    html = client.get("/p/project-a/members/").content.decode()
    assert "bob@example.com" in html
    assert "/members/invite/" not in html
    assert "Transfer ownership" not in html


def test_invite_by_plain_post_redirects_to_the_members_page(world, alice_client):
    response = alice_client.post("/p/project-a/members/invite/", {"user": "charlie", "role": "viewer"})

    assert response.status_code == 302
    assert response["Location"] == "/p/project-a/members/"
    assert role_of(world.project_a, world.charlie) == Role.VIEWER
    html = alice_client.get(response["Location"]).content.decode()
    assert "charlie@example.com" in html
    assert "charlie added." in html


def test_invite_by_htmx_returns_the_panel_with_the_new_member(world, alice_client):
    response = alice_client.post(
        "/p/project-a/members/invite/", {"user": "charlie@example.com", "role": "editor"}, **HTMX
    )

    assert response.status_code == 200
    assert templates_used(response)[0] == PANEL
    html = response.content.decode()
    assert "<html" not in html
    assert "charlie@example.com" in html
    assert [m.user.username for m in response.context["memberships"]] == ["alice", "bob", "charlie"]
    assert role_of(world.project_a, world.charlie) == Role.EDITOR


def test_invite_of_an_unknown_user_by_htmx_shows_the_error_in_the_panel(world, alice_client):
    response = alice_client.post("/p/project-a/members/invite/", {"user": "nobody", "role": "viewer"}, **HTMX)

    # htmx only swaps 2xx responses by default, so the error panel must not be a 4xx.
    assert response.status_code == 200
    assert templates_used(response)[0] == PANEL
    assert "No active user with username or email “nobody”." in response.content.decode()
    assert response.context["invite_form"]["user"].value() == "nobody"  # what was typed stays in the field
    assert world.project_a.memberships.count() == 2


def test_invite_of_an_unknown_user_by_plain_post_shows_the_error_after_redirect(world, alice_client):
    response = alice_client.post("/p/project-a/members/invite/", {"user": "nobody", "role": "viewer"}, follow=True)

    assert response.redirect_chain == [("/p/project-a/members/", 302)]
    assert "No active user with username or email “nobody”." in response.content.decode()
    assert world.project_a.memberships.count() == 2


def test_an_admin_is_not_offered_the_owner_role(world, client):
    admin = UserFactory(username="dave")
    add_member(world.project_a, admin, Role.ADMIN)
    client.force_login(admin)

    response = client.post("/p/project-a/members/invite/", {"user": "charlie", "role": "owner"}, **HTMX)

    assert response.status_code == 200
    assert "owner is not one of the available choices" in response.content.decode()
    assert role_of(world.project_a, world.charlie) is None


def test_role_change_by_htmx_updates_the_panel(world, alice_client, bob_membership):
    response = alice_client.post(f"/p/project-a/members/{bob_membership.pk}/role/", {"role": "admin"}, **HTMX)

    assert response.status_code == 200
    assert templates_used(response)[0] == PANEL
    assert role_of(world.project_a, world.bob) == Role.ADMIN
    html = response.content.decode()
    bob_select = html[html.index(f'id="role-{bob_membership.pk}"') :].split("</select>")[0]
    assert '<option value="admin" selected>' in bob_select


def test_demoting_the_last_owner_by_htmx_shows_the_error(world, alice_client):
    own = Membership.objects.get(project=world.project_a, user=world.alice)

    response = alice_client.post(f"/p/project-a/members/{own.pk}/role/", {"role": "viewer"}, **HTMX)

    assert response.status_code == 200
    assert "A project needs at least one owner" in response.content.decode()
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_remove_by_htmx_drops_the_member_from_the_panel(world, alice_client, bob_membership):
    response = alice_client.post(f"/p/project-a/members/{bob_membership.pk}/remove/", **HTMX)

    assert response.status_code == 200
    assert templates_used(response)[0] == PANEL
    assert "bob@example.com" not in response.content.decode()
    assert [m.user.username for m in response.context["memberships"]] == ["alice"]
    assert role_of(world.project_a, world.bob) is None


def test_remove_by_plain_post_redirects(world, alice_client, bob_membership):
    response = alice_client.post(f"/p/project-a/members/{bob_membership.pk}/remove/")
    assert response.status_code == 302
    assert response["Location"] == "/p/project-a/members/"
    assert role_of(world.project_a, world.bob) is None


def test_a_membership_of_another_project_is_404(world, alice_client):
    charlies = Membership.objects.get(project=world.project_b, user=world.charlie)
    assert alice_client.post(f"/p/project-a/members/{charlies.pk}/remove/", **HTMX).status_code == 404
    assert role_of(world.project_b, world.charlie) == Role.OWNER


# --- transfer and leave -----------------------------------------------------------------------


def test_transfer_makes_the_member_owner(world, alice_client):
    response = alice_client.post("/p/project-a/transfer/", {"user": "bob"}, follow=True)

    assert response.redirect_chain == [("/p/project-a/members/", 302)]
    assert "Ownership transferred to bob." in response.content.decode()
    assert role_of(world.project_a, world.bob) == Role.OWNER
    assert role_of(world.project_a, world.alice) == Role.ADMIN
    assert "Transfer ownership" not in response.content.decode()  # alice is no longer an owner


def test_transfer_to_a_non_member_shows_the_error(world, alice_client):
    response = alice_client.post("/p/project-a/transfer/", {"user": "charlie"}, follow=True)

    assert "Ownership can only go to a member of the project." in response.content.decode()
    assert role_of(world.project_a, world.alice) == Role.OWNER
    assert role_of(world.project_a, world.charlie) is None


def test_a_member_leaves_and_returns_to_the_dashboard(world, client):
    client.force_login(world.bob)

    response = client.post("/p/project-a/leave/", follow=True)

    assert response.redirect_chain == [("/", 302)]
    assert "You left Project A." in response.content.decode()
    assert role_of(world.project_a, world.bob) is None
    assert client.get("/p/project-a/").status_code == 404


def test_the_last_owner_leaving_sees_an_error_and_stays(world, alice_client):
    response = alice_client.post("/p/project-a/leave/", follow=True)

    assert response.redirect_chain == [("/p/project-a/members/", 302)]
    assert "A project needs at least one owner" in response.content.decode()
    assert role_of(world.project_a, world.alice) == Role.OWNER


def test_an_owner_chooses_where_the_projects_tasks_run(world):
    client = Client()
    client.force_login(world.alice)

    response = client.post(
        "/p/project-a/settings/", {"name": "Project A", "description": "", "runtime": "kubernetes"}, follow=True
    )

    assert response.status_code == 200
    world.project_a.refresh_from_db()
    assert world.project_a.runtime == "kubernetes"
    bad = client.post("/p/project-a/settings/", {"name": "Project A", "runtime": "mainframe"})
    assert bad.status_code == 400
    world.project_a.refresh_from_db()
    assert world.project_a.runtime == "kubernetes"
