"""Project secrets: encrypted at rest, write-only on every surface (service, pages, API, admin), editors manage them,
viewers see names only, outsiders get 404."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from apps.projects import secrets
from apps.projects.models import ProjectSecret, Role
from tests.conftest import token_client, user_client
from tests.factories import UserFactory, add_member

VALUE = "hf_Sup3rSecretValue-never-shown"
API = "/api/v1/project-secrets/"


@pytest.fixture
def secret(world) -> ProjectSecret:
    return secrets.create_secret(world.project_a, world.alice, name="HF_TOKEN", value=VALUE, description="Hub token")


@pytest.fixture
def viewer(world):
    user = UserFactory(username="victor")
    add_member(world.project_a, user, Role.VIEWER)
    return user


def raw_value(secret: ProjectSecret) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT value FROM {ProjectSecret._meta.db_table} WHERE id = %s", [secret.pk])
        return cursor.fetchone()[0]


# --- at rest ------------------------------------------------------------------------------------------


def test_the_database_column_holds_no_plaintext_and_reads_back_decrypted(secret):
    stored = raw_value(secret)
    assert VALUE not in stored
    assert "Sup3rSecret" not in stored
    assert len(stored) > len(VALUE)  # a Fernet token
    assert ProjectSecret.objects.get(pk=secret.pk).value == VALUE


# --- service ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["hf_token", "1TOKEN", "MY-TOKEN", "PORTAL_TOKEN", "MLFLOW_TRACKING_PASSWORD", "", "A" * 101]
)
def test_it_rejects_names_that_are_not_allowed_env_vars(world, name):
    with pytest.raises(ValidationError) as exc:
        secrets.create_secret(world.project_a, world.alice, name=name, value="x")
    assert "name" in exc.value.message_dict
    assert not ProjectSecret.objects.exists()


def test_names_are_unique_per_project_only(world, secret):
    with pytest.raises(ValidationError) as exc:
        secrets.create_secret(world.project_a, world.bob, name="HF_TOKEN", value="other")
    assert exc.value.message_dict["name"] == ["This project already has a secret named “HF_TOKEN”."]
    other = secrets.create_secret(world.project_b, world.charlie, name="HF_TOKEN", value="other")
    assert other.project == world.project_b


def test_an_empty_value_is_refused_and_nothing_is_written(world):
    with pytest.raises(ValidationError) as exc:
        secrets.create_secret(world.project_a, world.alice, name="EMPTY", value="")
    assert exc.value.message_dict == {"value": ["A secret needs a value."]}
    assert not ProjectSecret.objects.exists()


def test_replacing_changes_the_value_and_the_update_time(secret):
    before = secret.updated_at
    secrets.update_secret(secret, value="new-value")
    secret.refresh_from_db()
    assert secret.value == "new-value"
    assert secret.updated_at > before
    assert secret.description == "Hub token"


# --- pages ------------------------------------------------------------------------------------------


def test_the_page_lists_names_and_never_the_value(client, world, secret):
    client.force_login(world.bob)
    response = client.get(f"/p/{world.project_a.slug}/secrets/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "HF_TOKEN" in html
    assert "Hub token" in html
    assert "Replace value" in html
    assert VALUE not in html


def test_a_viewer_sees_names_but_no_form_and_cannot_change_anything(client, world, secret, viewer):
    client.force_login(viewer)
    html = client.get(f"/p/{world.project_a.slug}/secrets/").content.decode()
    assert "HF_TOKEN" in html
    assert "Replace value" not in html
    assert "Add a secret" not in html
    assert client.post(f"/p/{world.project_a.slug}/secrets/{secret.pk}/delete/").status_code == 403
    post = {"name": "NEW_ONE", "value": "abcdef"}
    assert client.post(f"/p/{world.project_a.slug}/secrets/new/", post).status_code == 403
    assert list(ProjectSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]


def test_outsiders_get_404(client, world, secret):
    client.force_login(world.charlie)
    assert client.get(f"/p/{world.project_a.slug}/secrets/").status_code == 404
    assert client.post(f"/p/{world.project_a.slug}/secrets/{secret.pk}/delete/").status_code == 404
    # a secret of project A addressed through project B, where charlie is owner: not found either
    assert client.post(f"/p/{world.project_b.slug}/secrets/{secret.pk}/delete/").status_code == 404
    assert ProjectSecret.objects.filter(pk=secret.pk).exists()


def test_an_editor_creates_replaces_and_deletes_through_the_pages(client, world):
    client.force_login(world.bob)
    base = f"/p/{world.project_a.slug}/secrets/"
    response = client.post(f"{base}new/", {"name": "DB_PASSWORD", "value": "pa55word!", "description": "db"})
    assert response.status_code == 302
    secret = ProjectSecret.objects.get(project=world.project_a, name="DB_PASSWORD")
    assert secret.value == "pa55word!"
    assert secret.created_by == world.bob
    assert client.post(f"{base}{secret.pk}/replace/", {"value": "n3w-pa55"}).status_code == 302
    secret.refresh_from_db()
    assert secret.value == "n3w-pa55"
    assert client.post(f"{base}{secret.pk}/delete/").status_code == 302
    assert not ProjectSecret.objects.exists()


def test_a_bad_name_on_the_page_is_a_field_error_and_the_value_is_not_rendered_back(client, world):
    client.force_login(world.bob)
    typed = "typed-value-1234"
    response = client.post(f"/p/{world.project_a.slug}/secrets/new/", {"name": "PORTAL_X", "value": typed})
    html = response.content.decode()
    assert response.status_code == 400
    assert "not starting with a digit, PORTAL_ or MLFLOW_" in html
    assert typed not in html
    assert not ProjectSecret.objects.exists()


# --- API ----------------------------------------------------------------------------------------------


def test_the_api_creates_a_secret_and_never_returns_the_value(world):
    body = {"project": "project-a", "name": "API_KEY", "value": VALUE, "description": "d"}
    response = user_client(world.bob).post(API, body, format="json")
    assert response.status_code == 201, response.json()
    assert "value" not in response.json()
    assert VALUE not in response.content.decode()
    assert response.json()["name"] == "API_KEY"
    assert response.json()["created_by"] == "bob"
    secret = ProjectSecret.objects.get(name="API_KEY")
    assert secret.value == VALUE
    listed = user_client(world.alice).get(API, {"project": "project-a"})
    detail = user_client(world.alice).get(f"{API}{secret.pk}/")
    for response in (listed, detail):
        assert response.status_code == 200
        assert VALUE not in response.content.decode()
    assert [r["name"] for r in listed.json()["results"]] == ["API_KEY"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"project": "project-a", "name": "bad name", "value": "x"}, "name"),
        ({"project": "project-a", "name": "MLFLOW_X", "value": "x"}, "name"),
        ({"project": "project-a", "name": "NO_VALUE"}, "value"),
        ({"project": "project-a", "name": "EMPTY", "value": ""}, "value"),
        ({"name": "NO_PROJECT", "value": "x"}, "project"),
    ],
)
def test_the_api_answers_400_with_field_messages(world, body, field):
    response = user_client(world.bob).post(API, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ProjectSecret.objects.exists()


def test_the_api_refuses_a_duplicate_name_with_a_field_message(world, secret):
    response = user_client(world.bob).post(
        API, {"project": "project-a", "name": "HF_TOKEN", "value": "x"}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"name": ["This project already has a secret named “HF_TOKEN”."]}
    assert ProjectSecret.objects.get(pk=secret.pk).value == VALUE


def test_patch_replaces_the_value_but_never_the_name(world, secret):
    url = f"{API}{secret.pk}/"
    response = user_client(world.bob).patch(url, {"value": "replaced!", "name": "RENAMED"}, format="json")
    assert response.status_code == 200
    assert "value" not in response.json()
    secret.refresh_from_db()
    assert (secret.name, secret.value) == ("HF_TOKEN", "replaced!")
    response = user_client(world.bob).patch(url, {"description": "only this"}, format="json")
    secret.refresh_from_db()
    assert (secret.value, secret.description) == ("replaced!", "only this")


def test_api_roles_viewer_reads_names_outsider_404_read_token_cannot_write(world, secret, viewer):
    url = f"{API}{secret.pk}/"
    assert user_client(viewer).get(url).json()["name"] == "HF_TOKEN"
    assert user_client(viewer).delete(url).status_code == 403
    body = {"project": "project-a", "name": "FROM_VIEWER", "value": "abcd"}
    assert user_client(viewer).post(API, body, format="json").status_code == 403
    assert user_client(world.charlie).get(url).status_code == 404
    assert user_client(world.charlie).delete(url).status_code == 404
    assert token_client(world.alice, scope="read").delete(url).status_code == 403
    assert user_client(world.bob).delete(url).status_code == 204
    assert not ProjectSecret.objects.exists()


# --- admin --------------------------------------------------------------------------------------------


def test_the_admin_never_renders_the_value_and_an_empty_field_keeps_it(client, world, secret):
    admin_user = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(admin_user)
    url = f"/admin/projects/projectsecret/{secret.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert VALUE not in page.content.decode()
    response = client.post(url, {"new_value": "", "description": "edited"})
    assert response.status_code == 302
    secret.refresh_from_db()
    assert (secret.value, secret.description) == (VALUE, "edited")
    client.post(url, {"new_value": "from-admin", "description": "edited"})
    secret.refresh_from_db()
    assert secret.value == "from-admin"
