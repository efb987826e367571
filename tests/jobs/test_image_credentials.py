"""Registry credentials of an image: the password is write-only in the form, the API serializer and the admin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.test import Client

from apps.jobs.api.serializers import ImageSerializer
from apps.jobs.forms import ImageForm
from apps.jobs.models import Image
from tests.factories import UserFactory

PASSWORD = "s3cret-Registry-pw-7781"


@pytest.fixture
def image(world) -> Image:
    return Image.objects.create(
        project=world.project_a, name="registry.example.com/team/train:1", registry="registry.example.com",
        registry_username="robot", registry_password=PASSWORD,
    )  # fmt: skip


def form_data(**overrides) -> dict:
    data = {"name": "registry.example.com/team/train:1", "description": "", "registry": "registry.example.com"}
    data.update({"registry_username": "robot", "registry_password": "", **overrides})
    return data


def serializer_context(user) -> dict:
    return {"request": SimpleNamespace(user=user, auth=None)}


# --- the form ----------------------------------------------------------------------------------------


def test_the_form_never_renders_the_stored_password_and_shows_the_rest(image):
    html = str(ImageForm(instance=image))
    assert PASSWORD not in html
    assert 'value="robot"' in html
    assert 'value="registry.example.com"' in html


def test_the_form_does_not_echo_a_typed_password_after_an_error(image):
    form = ImageForm(form_data(registry="", registry_password="typed-Secret-99"), instance=image)
    assert not form.is_valid()
    assert "typed-Secret-99" not in str(form)


def test_an_empty_password_on_edit_keeps_the_stored_one(image):
    form = ImageForm(form_data(description="nightly"), instance=image)
    assert form.is_valid(), form.errors
    form.save()
    image.refresh_from_db()
    assert (image.description, image.registry_password) == ("nightly", PASSWORD)


def test_a_new_password_replaces_it_and_remove_clears_it(image):
    form = ImageForm(form_data(registry_password="rotated-pw"), instance=image)
    assert form.is_valid(), form.errors
    form.save()
    image.refresh_from_db()
    assert image.registry_password == "rotated-pw"

    form = ImageForm(form_data(registry_username="", registry="", clear_registry_password="on"), instance=image)
    assert form.is_valid(), form.errors
    form.save()
    image.refresh_from_db()
    assert (image.registry_password, image.registry_username) == ("", "")


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"registry_username": ""}, "registry_username", "needs a username"),
        ({"registry": ""}, "registry", "Name the registry"),
        ({"registry_password": "x", "clear_registry_password": "on"}, "clear_registry_password", "Either type"),
    ],
)
def test_incomplete_credentials_are_field_errors(image, overrides, field, message):
    form = ImageForm(form_data(**overrides), instance=image)
    assert not form.is_valid()
    assert message in form.errors[field][0]
    image.refresh_from_db()
    assert (image.registry_username, image.registry_password) == ("robot", PASSWORD)


# --- the API serializer ------------------------------------------------------------------------------


def test_the_serializer_never_returns_the_password(world, image):
    data = ImageSerializer(image, context=serializer_context(world.alice)).data
    assert "registry_password" not in data
    assert PASSWORD not in str(data)
    assert (data["registry_username"], data["registry"], data["has_registry_password"]) == (
        "robot",
        "registry.example.com",
        True,
    )


def test_the_serializer_creates_with_a_password_and_keeps_it_on_a_partial_update(world):
    context = serializer_context(world.alice)
    body = {"project": "project-a", "name": "private:1", "registry": "r.example", "registry_username": "u"}
    created = ImageSerializer(data={**body, "registry_password": PASSWORD}, context=context)
    assert created.is_valid(), created.errors
    image = created.save()
    assert Image.objects.get(pk=image.pk).registry_password == PASSWORD

    update = ImageSerializer(image, data={"description": "x", "registry_password": ""}, partial=True, context=context)
    assert update.is_valid(), update.errors
    update.save()
    assert Image.objects.get(pk=image.pk).registry_password == PASSWORD

    cleared = ImageSerializer(image, data={"registry_password": None}, partial=True, context=context)
    assert cleared.is_valid(), cleared.errors
    cleared.save()
    assert Image.objects.get(pk=image.pk).registry_password == ""


def test_the_serializer_names_the_missing_credential_field(world, image):
    context = serializer_context(world.alice)
    serializer = ImageSerializer(image, data={"registry_username": ""}, partial=True, context=context)
    assert not serializer.is_valid()
    assert "needs a username" in str(serializer.errors["registry_username"][0])


def test_the_serializer_refuses_another_tenants_project(world):
    body = {"project": "project-a", "name": "x", "registry_password": PASSWORD}
    serializer = ImageSerializer(data=body, context=serializer_context(world.charlie))
    assert not serializer.is_valid()
    assert "project" in serializer.errors


# --- the admin ---------------------------------------------------------------------------------------


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_change_page_never_renders_the_password(root, image):
    response = admin_client(root).get(f"/admin/jobs/image/{image.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    assert PASSWORD not in html
    assert 'value="robot"' in html


def test_saving_in_the_admin_without_a_password_keeps_it(world, root, image):
    response = admin_client(root).post(
        f"/admin/jobs/image/{image.pk}/change/",
        {**form_data(description="via admin"), "project": world.project_a.pk},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    image.refresh_from_db()
    assert (image.description, image.registry_password) == ("via admin", PASSWORD)


def test_the_admin_changelist_shows_the_registry_not_the_password(root, image):
    html = admin_client(root).get("/admin/jobs/image/").content.decode()
    assert "registry.example.com" in html
    assert PASSWORD not in html
