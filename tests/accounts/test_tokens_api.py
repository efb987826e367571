"""/api/v1/tokens/: the raw token appears once, in the create response; DELETE revokes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, hash_token
from apps.accounts.services import create_token
from apps.projects.models import Role
from tests.conftest import token_client
from tests.factories import add_member

LIST_URL = reverse("api:token-list")


def detail_url(token: ApiToken) -> str:
    return reverse("api:token-detail", kwargs={"pk": token.pk})


@pytest.fixture
def alice_api(world, api) -> APIClient:
    api.force_authenticate(world.alice)
    return api


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_create_returns_the_raw_token_once(alice_api, world):
    response = alice_api.post(
        LIST_URL, {"name": "ci", "project": "project-a", "scope": "read", "days": 30}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    raw = body["token"]
    assert raw.startswith("mlp_")
    assert body["prefix"] == raw[:12]
    assert body["name"] == "ci"
    assert body["project"] == "project-a"
    assert body["scope"] == "read"
    assert body["expires_at"] is not None
    assert body["is_active"] is True
    assert "days" not in body
    assert "digest" not in body
    token = ApiToken.objects.get(pk=body["id"])
    assert token.user == world.alice
    assert token.digest == hash_token(raw)


def test_list_and_retrieve_never_show_the_raw_token(alice_api):
    created = alice_api.post(LIST_URL, {"name": "ci"}, format="json").json()

    listed = alice_api.get(LIST_URL).json()["results"]
    retrieved = alice_api.get(reverse("api:token-detail", kwargs={"pk": created["id"]})).json()

    assert [t["id"] for t in listed] == [created["id"]]
    assert "token" not in listed[0]
    assert "token" not in retrieved
    assert retrieved["prefix"] == created["prefix"]
    assert created["token"] not in str(listed) + str(retrieved)


def test_list_shows_only_my_tokens(alice_api, world):
    create_token(world.bob, name="bob's")
    mine, _raw = create_token(world.alice, name="mine")

    listed = alice_api.get(LIST_URL).json()["results"]

    assert [(t["id"], t["name"]) for t in listed] == [(mine.pk, "mine")]


def test_the_created_token_authenticates_a_request(alice_api):
    raw = alice_api.post(LIST_URL, {"name": "ci"}, format="json").json()["token"]

    response = bearer(raw).get(reverse("api:me"))

    assert response.status_code == 200
    assert response.json()["username"] == "alice"


def test_a_token_without_project_or_scope_defaults_to_all_projects_and_write(alice_api):
    body = alice_api.post(LIST_URL, {"name": "ci"}, format="json").json()

    assert body["project"] is None
    assert body["scope"] == "write"
    assert body["expires_at"] is None


def test_delete_revokes_but_keeps_the_row(alice_api, world):
    token, raw = create_token(world.alice, name="ci")
    assert bearer(raw).get(reverse("api:me")).status_code == 200

    response = alice_api.delete(detail_url(token))

    assert response.status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert not token.is_active
    assert bearer(raw).get(reverse("api:me")).status_code == 401
    shown = alice_api.get(detail_url(token)).json()
    assert shown["revoked_at"] is not None
    assert shown["is_active"] is False


def test_deleting_twice_keeps_the_first_revocation(alice_api, world):
    token, _raw = create_token(world.alice, name="ci")
    alice_api.delete(detail_url(token))
    token.refresh_from_db()
    first = token.revoked_at

    assert alice_api.delete(detail_url(token)).status_code == 204

    token.refresh_from_db()
    assert token.revoked_at == first


def test_a_token_can_revoke_itself(world):
    token, raw = create_token(world.alice, name="ci")

    assert bearer(raw).delete(detail_url(token)).status_code == 204

    assert bearer(raw).get(reverse("api:me")).status_code == 401


def test_create_without_name_is_400_on_name(alice_api):
    response = alice_api.post(LIST_URL, {"scope": "read"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["name"]
    assert isinstance(response.json()["name"], list)
    assert not ApiToken.objects.exists()


def test_create_with_blank_name_is_400_on_name(alice_api):
    response = alice_api.post(LIST_URL, {"name": "   "}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["name"]


@pytest.mark.parametrize("days", [0, -5, 100_000])
def test_create_with_days_out_of_range_is_400_on_days(alice_api, settings, days):
    settings.PORTAL_TOKEN_MAX_DAYS = 365
    response = alice_api.post(LIST_URL, {"name": "ci", "days": days}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["days"]
    assert not ApiToken.objects.exists()


def test_create_with_an_unknown_project_is_400_on_project(alice_api):
    response = alice_api.post(LIST_URL, {"name": "ci", "project": "no-such-project"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["project"]
    assert "no-such-project" in response.json()["project"][0]


def test_create_for_someone_elses_project_is_400_on_project(alice_api):
    # project-b exists but alice is not in it: indistinguishable from an unknown slug.
    response = alice_api.post(LIST_URL, {"name": "ci", "project": "project-b"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["project"]
    assert not ApiToken.objects.exists()


def test_create_with_an_unknown_scope_is_400_on_scope(alice_api):
    response = alice_api.post(LIST_URL, {"name": "ci", "scope": "admin"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["scope"]


def test_a_read_scoped_token_cannot_create_tokens(world):
    client = token_client(world.alice, scope="read")

    response = client.post(LIST_URL, {"name": "escalate"}, format="json")

    assert response.status_code == 403
    assert ApiToken.objects.filter(user=world.alice).count() == 1


def test_a_read_scoped_token_cannot_revoke_tokens(world):
    other, _raw = create_token(world.alice, name="other")
    client = token_client(world.alice, scope="read")

    assert client.delete(detail_url(other)).status_code == 403

    other.refresh_from_db()
    assert other.revoked_at is None


def test_a_read_scoped_token_can_list_tokens(world):
    client = token_client(world.alice, scope="read")

    response = client.get(LIST_URL)

    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_a_project_token_cannot_create_a_token_for_another_project(world):
    add_member(world.project_b, world.alice, Role.EDITOR)
    client = token_client(world.alice, project=world.project_a)

    response = client.post(LIST_URL, {"name": "wider", "project": "project-b"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["project"]


def test_a_project_token_cannot_create_a_token_for_all_projects(world):
    add_member(world.project_b, world.alice, Role.EDITOR)
    client = token_client(world.alice, project=world.project_a)

    response = client.post(LIST_URL, {"name": "wider"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["project"]
    assert not ApiToken.objects.filter(name="wider").exists()


def test_a_project_token_can_create_a_token_for_its_own_project(world):
    client = token_client(world.alice, project=world.project_a)

    response = client.post(LIST_URL, {"name": "same", "project": "project-a", "scope": "read"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["project"] == "project-a"


def test_an_expiring_token_cannot_create_a_token_that_outlives_it(world):
    client = token_client(world.alice, days=10)

    forever = client.post(LIST_URL, {"name": "forever"}, format="json")
    longer = client.post(LIST_URL, {"name": "longer", "days": 30}, format="json")
    shorter = client.post(LIST_URL, {"name": "shorter", "days": 5}, format="json")

    assert forever.status_code == 400
    assert list(forever.json()) == ["days"]
    assert longer.status_code == 400
    assert list(longer.json()) == ["days"]
    assert shorter.status_code == 201, shorter.content


@pytest.mark.parametrize("days", [0, 10**12])
def test_an_expiring_token_asking_for_out_of_range_days_gets_the_range_error(world, settings, days):
    settings.PORTAL_TOKEN_MAX_DAYS = 365
    client = token_client(world.alice, days=10)

    response = client.post(LIST_URL, {"name": "x", "days": days}, format="json")

    assert response.status_code == 400
    assert response.json()["days"] == ["Expiry must be between 1 and 365 days."]


def test_a_project_token_sees_and_revokes_only_that_projects_tokens(world):
    personal, _raw = create_token(world.alice, name="all")
    client = token_client(world.alice, project=world.project_a)
    names = {row["name"] for row in client.get("/api/v1/tokens/").json()["results"]}
    assert "all" not in names
    assert client.delete(f"/api/v1/tokens/{personal.pk}/").status_code == 404
    assert ApiToken.objects.get(pk=personal.pk).revoked_at is None


def test_a_project_token_cannot_change_the_account(world):
    client = token_client(world.alice, project=world.project_a)
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    response = client.patch("/api/v1/me/", {"email": "attacker@example.com"}, format="json")
    assert response.status_code == 403
    world.alice.refresh_from_db()
    assert world.alice.email == "alice@example.com"


# --- expires_at (issue 27: it was read-only, so a given expiry was dropped and the token never expired) --------


def test_create_with_expires_at_makes_a_token_that_expires_then(alice_api, world):
    when = timezone.now() + timedelta(days=3)

    response = alice_api.post(LIST_URL, {"name": "ci", "expires_at": when.isoformat()}, format="json")

    assert response.status_code == 201, response.content
    token = ApiToken.objects.get(user=world.alice, name="ci")
    assert token.expires_at == when
    assert response.json()["expires_at"] is not None


@pytest.mark.parametrize("offset", [timedelta(days=-1), timedelta(days=400)])
def test_create_with_expires_at_in_the_past_or_too_far_is_400_on_expires_at(alice_api, settings, world, offset):
    settings.PORTAL_TOKEN_MAX_DAYS = 365
    when = timezone.now() + offset

    response = alice_api.post(LIST_URL, {"name": "ci", "expires_at": when.isoformat()}, format="json")

    assert response.status_code == 400
    assert response.json() == {"expires_at": ["The expiry must be in the future and at most 365 days away."]}
    assert not ApiToken.objects.filter(user=world.alice, name="ci").exists()


def test_create_with_both_days_and_expires_at_is_400(alice_api, world):
    when = timezone.now() + timedelta(days=3)

    response = alice_api.post(LIST_URL, {"name": "ci", "days": 3, "expires_at": when.isoformat()}, format="json")

    assert response.status_code == 400
    assert response.json() == {"expires_at": ["Give either days or expires_at, not both."]}


def test_an_expiring_token_cannot_create_a_token_whose_expires_at_outlives_it(world):
    client = token_client(world.alice, days=10)

    longer = client.post(
        LIST_URL, {"name": "l", "expires_at": (timezone.now() + timedelta(days=30)).isoformat()}, format="json"
    )
    shorter = client.post(
        LIST_URL, {"name": "s", "expires_at": (timezone.now() + timedelta(days=5)).isoformat()}, format="json"
    )

    assert longer.status_code == 400
    assert list(longer.json()) == ["expires_at"]
    assert shorter.status_code == 201, shorter.content
