"""Images with registry credentials through the API: the password is write-only and encrypted at rest."""

from __future__ import annotations

import pytest
from django.db import connection

from apps.jobs.models import Image
from apps.projects.models import Role
from tests.conftest import user_client
from tests.factories import UserFactory, add_member

pytestmark = pytest.mark.django_db


def raw_password(image: Image) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT registry_password FROM jobs_image WHERE id = %s", [image.pk])
        return cursor.fetchone()[0]


def test_an_editor_registers_a_private_image_and_the_password_never_comes_back(world):
    client = user_client(world.bob)
    body = {
        "project": "project-a", "name": "registry.example.com/team/train:1.2", "registry": "registry.example.com",
        "registry_username": "robot", "registry_password": "s3cret-pass-42",
    }  # fmt: skip

    response = client.post("/api/v1/images/", body, format="json")

    assert response.status_code == 201, response.json()
    assert "registry_password" not in response.json()
    assert response.json()["has_registry_password"] is True
    image = Image.objects.get(pk=response.json()["id"])
    assert image.registry_password == "s3cret-pass-42"
    assert "s3cret" not in (raw_password(image) or "")
    listed = client.get("/api/v1/images/").content.decode()
    assert "s3cret" not in listed
    assert "robot" in listed


def test_viewers_cannot_add_images_and_outsiders_do_not_see_them(world):
    viewer = add_member(world.project_a, UserFactory(username="vera"), Role.VIEWER).user
    image = Image.objects.create(project=world.project_a, name="private:1", registry="r.example", registry_username="u")

    denied = user_client(viewer).post("/api/v1/images/", {"project": "project-a", "name": "x:1"}, format="json")
    assert denied.status_code == 403

    assert user_client(world.charlie).get(f"/api/v1/images/{image.pk}/").status_code == 404


def test_built_in_images_are_visible_but_read_only(world):
    builtin = Image.objects.create(project=None, name="python:3.11-slim")
    client = user_client(world.alice)

    assert client.get(f"/api/v1/images/{builtin.pk}/").status_code == 200
    assert client.delete(f"/api/v1/images/{builtin.pk}/").status_code == 403
    assert Image.objects.filter(pk=builtin.pk).exists()


def test_credentials_without_a_registry_are_a_field_error_and_nothing_is_saved(world):
    response = user_client(world.alice).post(
        "/api/v1/images/",
        {"project": "project-a", "name": "x:1", "registry_username": "robot", "registry_password": "p"},
        format="json",
    )

    assert response.status_code == 400
    assert "registry" in response.json()
    assert not Image.objects.exists()
