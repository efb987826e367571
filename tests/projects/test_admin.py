"""The Django admin for projects: staff who are not superusers see only their own projects."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from apps.projects.models import Membership, Role
from tests.factories import UserFactory, add_member


def project_admin_url(project, view: str = "change") -> str:
    return f"/admin/projects/project/{project.pk}/{view}/"


@pytest.fixture
def staff(db):
    """A staff user with the model-level view/change permissions the admin needs to open the Project pages."""
    user = UserFactory(username="sam", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="projects", codename__in=["view_project", "change_project"])
    )
    return user


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_staff_outside_the_project_gets_404_on_its_change_page(world, staff):
    response = logged_in(staff).get(project_admin_url(world.project_a))
    assert response.status_code == 404


@pytest.mark.parametrize("view", ["delete", "history"])
def test_staff_outside_the_project_gets_404_on_its_other_pages(world, staff, view):
    assert logged_in(staff).get(project_admin_url(world.project_a, view)).status_code == 404


def test_a_superuser_opens_any_projects_change_page(world):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)

    response = logged_in(root).get(project_admin_url(world.project_a))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'value="Project A"' in html
    assert "bob" in html  # the membership inline


def test_the_changelist_shows_staff_only_their_projects(world, staff):
    add_member(world.project_a, staff, Role.VIEWER)

    response = logged_in(staff).get("/admin/projects/project/")

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [world.project_a]
    html = response.content.decode()
    assert "Project A" in html
    assert "Project B" not in html


def test_a_superusers_changelist_shows_every_project(world):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    response = logged_in(root).get("/admin/projects/project/")
    assert set(response.context["cl"].result_list) == {world.project_a, world.project_b}


def test_a_staff_viewer_sees_the_change_page_read_only(world, staff):
    add_member(world.project_a, staff, Role.VIEWER)
    client = logged_in(staff)

    assert client.get(project_admin_url(world.project_a)).status_code == 200
    response = client.post(project_admin_url(world.project_a), {"name": "Hijacked", "description": ""})

    assert response.status_code == 403
    world.project_a.refresh_from_db()
    assert world.project_a.name == "Project A"


def test_a_staff_viewer_cannot_grant_themself_object_permissions(world, staff):
    """Object permissions follow roles only: no admin page (such as guardian's object-permission pages,
    which need nothing but the model change permission) may grant them."""
    add_member(world.project_a, staff, Role.VIEWER)
    client = logged_in(staff)

    client.post(
        project_admin_url(world.project_a, f"permissions/user-manage/{staff.pk}"),
        {"permissions": ["delete_project", "transfer_project", "manage_members"]},
        follow=True,
    )

    assert not staff.has_perm("projects.delete_project", world.project_a)
    assert not staff.has_perm("projects.manage_members", world.project_a)
    assert Membership.objects.get(project=world.project_a, user=staff).role == Role.VIEWER
    assert "/permissions/" not in client.get(project_admin_url(world.project_a)).content.decode()
