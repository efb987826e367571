"""apps.accounts.authentication: API tokens in the Authorization header, tried against /api/v1/me/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token, revoke_token


def get_me(header: str):
    client = APIClient()
    return client.get(reverse("api:me"), HTTP_AUTHORIZATION=header)


def assert_unauthorized(response) -> None:
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize("keyword", ["Bearer", "Token", "bearer", "TOKEN"])
def test_it_accepts_bearer_and_token_keywords(world, keyword):
    _token, raw = create_token(world.alice, name="x")

    response = get_me(f"{keyword} {raw}")

    assert response.status_code == 200
    assert response.json()["username"] == "alice"


def test_the_token_authenticates_its_own_user(world):
    _token, raw = create_token(world.bob, name="x")

    assert get_me(f"Bearer {raw}").json()["username"] == "bob"


def test_a_revoked_token_is_rejected(world):
    token, raw = create_token(world.alice, name="x")
    assert get_me(f"Bearer {raw}").status_code == 200

    revoke_token(token)

    assert_unauthorized(get_me(f"Bearer {raw}"))


def test_an_expired_token_is_rejected(world):
    token, raw = create_token(world.alice, name="x", days=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert_unauthorized(get_me(f"Bearer {raw}"))


def test_a_token_not_yet_expired_is_accepted(world):
    token, raw = create_token(world.alice, name="x", days=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + timedelta(minutes=1))

    assert get_me(f"Bearer {raw}").status_code == 200


@pytest.mark.parametrize(
    "raw",
    ["garbage", "mlp_" + "A" * 43, "ä-not-ascii"],
)
def test_an_unknown_token_is_rejected(world, raw):
    create_token(world.alice, name="x")

    assert_unauthorized(get_me(f"Bearer {raw}"))


def test_a_token_with_one_character_changed_is_rejected(world):
    _token, raw = create_token(world.alice, name="x")
    tampered = raw[:-1] + ("a" if raw[-1] != "a" else "b")

    assert_unauthorized(get_me(f"Bearer {tampered}"))


@pytest.mark.parametrize("header", ["Bearer a b", "Token a b c", "Bearer", "Token "])
def test_a_malformed_header_is_rejected(world, header):
    assert_unauthorized(get_me(header))


def test_a_header_with_another_scheme_leaves_the_request_anonymous(world):
    # Not a token scheme: token auth steps aside, nobody is signed in, and the answer is still 401.
    response = get_me("Basic YWxpY2U6cGFzc3dvcmQ=")

    assert_unauthorized(response)
    assert "username" not in response.json()


def test_an_inactive_users_token_is_rejected(world):
    _token, raw = create_token(world.alice, name="x")
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])

    assert_unauthorized(get_me(f"Bearer {raw}"))


def test_use_records_last_used_at(world):
    token, raw = create_token(world.alice, name="x")
    assert token.last_used_at is None
    before = timezone.now()

    get_me(f"Bearer {raw}")

    token.refresh_from_db()
    assert token.last_used_at is not None
    assert before <= token.last_used_at <= timezone.now()


def test_last_used_at_is_written_at_most_once_a_minute(world):
    token, raw = create_token(world.alice, name="x")
    recent = timezone.now() - timedelta(seconds=30)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=recent)

    get_me(f"Bearer {raw}")
    token.refresh_from_db()
    assert token.last_used_at == recent

    stale = timezone.now() - timedelta(minutes=5)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=stale)
    get_me(f"Bearer {raw}")
    token.refresh_from_db()
    assert token.last_used_at > stale


def test_a_rejected_token_does_not_record_use(world):
    token, raw = create_token(world.alice, name="x")
    revoke_token(token)

    get_me(f"Bearer {raw}")

    token.refresh_from_db()
    assert token.last_used_at is None
