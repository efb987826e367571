"""apps.accounts.services: create_token and purge_expired_tokens."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token, purge_expired_tokens, revoke_token
from apps.projects.models import Role
from tests.factories import UserFactory, add_member

PREFIX_LENGTH = 12


def stored_rows() -> list[tuple]:
    """Every row of the token table, every column, read past the ORM."""
    table = connection.ops.quote_name(ApiToken._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        return cursor.fetchall()


def test_it_never_stores_the_raw_token(world):
    created = [
        create_token(world.alice, name="laptop"),
        create_token(world.alice, name="ci", project=world.project_a, scope="read", days=30),
        create_token(world.bob, name="bob's"),
    ]
    rows = stored_rows()
    assert len(rows) == 3
    assert all(len(row) == len(ApiToken._meta.concrete_fields) for row in rows)
    values = [str(value) for row in rows for value in row if value is not None]
    for _token, raw in created:
        assert len(raw) > PREFIX_LENGTH + 1
        # Any substring longer than the prefix contains one of exactly PREFIX_LENGTH + 1 characters.
        pieces = {raw[i : i + PREFIX_LENGTH + 1] for i in range(len(raw) - PREFIX_LENGTH)}
        leaks = [(piece, value) for value in values for piece in pieces if piece in value]
        assert leaks == [], f"raw token leaked into the table: {leaks[:3]}"
        assert raw[:PREFIX_LENGTH] in values  # the prefix is what may be kept, and is


def test_it_stores_the_sha256_digest_and_the_prefix(world):
    token, raw = create_token(world.alice, name="laptop")

    token.refresh_from_db()
    assert token.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert token.prefix == raw[:PREFIX_LENGTH]
    assert raw.startswith("mlp_")


def test_it_makes_a_different_token_each_time(world):
    raws = {create_token(world.alice, name=f"t{i}")[1] for i in range(5)}
    assert len(raws) == 5


def test_it_sets_expiry_from_days(world):
    before = timezone.now()
    token, _raw = create_token(world.alice, name="short", days=7)

    assert before + timedelta(days=7) <= token.expires_at <= timezone.now() + timedelta(days=7)


def test_a_token_without_days_never_expires(world):
    token, _raw = create_token(world.alice, name="forever")

    assert token.expires_at is None
    assert token.is_active


@pytest.mark.parametrize("days", [0, -1])
def test_it_rejects_expiry_below_one_day(world, days):
    with pytest.raises(ValidationError) as exc:
        create_token(world.alice, name="x", days=days)

    assert list(exc.value.message_dict) == ["days"]
    assert not ApiToken.objects.exists()


def test_it_rejects_expiry_beyond_the_maximum(world, settings):
    settings.PORTAL_TOKEN_MAX_DAYS = 90

    with pytest.raises(ValidationError) as exc:
        create_token(world.alice, name="x", days=91)

    assert list(exc.value.message_dict) == ["days"]
    assert "90" in exc.value.message_dict["days"][0]
    assert not ApiToken.objects.exists()


def test_it_accepts_expiry_at_the_maximum(world, settings):
    settings.PORTAL_TOKEN_MAX_DAYS = 90

    token, _raw = create_token(world.alice, name="x", days=90)

    assert token.expires_at > timezone.now() + timedelta(days=89)


def test_it_refuses_a_project_token_for_a_non_member(world):
    with pytest.raises(ValidationError) as exc:
        create_token(world.charlie, name="x", project=world.project_a)

    assert list(exc.value.message_dict) == ["project"]
    assert not ApiToken.objects.filter(user=world.charlie).exists()


def test_it_limits_a_token_to_a_project_the_user_belongs_to(world):
    token, _raw = create_token(world.bob, name="x", project=world.project_a, scope="read")

    assert token.project == world.project_a
    assert token.read_only


def test_it_rejects_a_blank_name_and_an_unknown_scope_together(world):
    with pytest.raises(ValidationError) as exc:
        create_token(world.alice, name="  ", scope="admin")

    assert set(exc.value.message_dict) == {"name", "scope"}


def test_purge_removes_long_expired_and_long_revoked_tokens_only(db):
    user = UserFactory()
    now = timezone.now()

    def token(name: str, **fields) -> ApiToken:
        created, _raw = create_token(user, name=name)
        ApiToken.objects.filter(pk=created.pk).update(**fields)
        return created

    long_expired = token("long expired", expires_at=now - timedelta(days=31))
    long_revoked = token("long revoked", revoked_at=now - timedelta(days=31))
    both = token("both", expires_at=now - timedelta(days=40), revoked_at=now - timedelta(days=40))
    kept = [
        token("active"),
        token("expires later", expires_at=now + timedelta(days=5)),
        token("recently expired", expires_at=now - timedelta(days=29)),
        token("recently revoked", revoked_at=now - timedelta(days=29)),
        token("unused for ages", last_used_at=now - timedelta(days=400), created_at=now - timedelta(days=400)),
    ]

    assert purge_expired_tokens() == 3

    remaining = set(ApiToken.objects.values_list("pk", flat=True))
    assert remaining == {t.pk for t in kept}
    assert not remaining & {long_expired.pk, long_revoked.pk, both.pk}


def test_purge_honours_older_than_days(db):
    user = UserFactory()
    token, _raw = create_token(user, name="revoked")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now() - timedelta(days=3))

    assert purge_expired_tokens(older_than_days=7) == 0
    assert purge_expired_tokens(older_than_days=2) == 1
    assert not ApiToken.objects.exists()


def test_revoke_keeps_the_first_revocation_time(world):
    token, _raw = create_token(world.alice, name="x")
    first = revoke_token(token).revoked_at

    token.refresh_from_db()
    assert revoke_token(token).revoked_at == first
    assert not token.is_active


def test_a_token_made_via_a_project_token_must_stay_in_that_project(world):
    add_member(world.project_b, world.alice, Role.EDITOR)
    via, _raw = create_token(world.alice, name="limited", project=world.project_a)

    for project in (None, world.project_b):
        with pytest.raises(ValidationError) as exc:
            create_token(world.alice, name="wider", project=project, via=via)
        assert list(exc.value.message_dict) == ["project"]

    token, _raw = create_token(world.alice, name="same", project=world.project_a, via=via)
    assert token.project == world.project_a


def test_a_token_made_via_a_read_token_must_be_read_only(world):
    via, _raw = create_token(world.alice, name="reader", scope="read")

    with pytest.raises(ValidationError) as exc:
        create_token(world.alice, name="writer", scope="write", via=via)

    assert list(exc.value.message_dict) == ["scope"]
    assert create_token(world.alice, name="reader 2", scope="read", via=via)[0].read_only


def test_a_token_made_via_an_expiring_token_cannot_outlive_it(world):
    via, _raw = create_token(world.alice, name="short", days=10)

    for days in (None, 11):
        with pytest.raises(ValidationError) as exc:
            create_token(world.alice, name="longer", days=days, via=via)
        assert list(exc.value.message_dict) == ["days"]

    token, _raw = create_token(world.alice, name="shorter", days=9, via=via)
    assert token.expires_at < via.expires_at


def test_an_unlimited_token_may_make_any_token(world):
    via, _raw = create_token(world.alice, name="full")

    token, _raw = create_token(world.alice, name="narrow", project=world.project_a, scope="read", days=1, via=via)
    assert (token.project, token.scope) == (world.project_a, "read")
    assert create_token(world.alice, name="also full", via=via)[0].expires_at is None
