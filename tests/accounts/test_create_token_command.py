"""`manage.py create_token`: prints a raw token once, for scripts and first setup."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, hash_token


def create_token(*args: str) -> str:
    out = StringIO()
    call_command("create_token", *args, stdout=out)
    return out.getvalue().strip()


def test_it_prints_a_token_that_authenticates(world):
    raw = create_token("alice")

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get(reverse("api:me"))
    assert response.status_code == 200
    assert response.json()["username"] == "alice"


def test_it_prints_only_the_token(world):
    raw = create_token("alice")

    assert "\n" not in raw
    assert raw.startswith("mlp_")
    token = ApiToken.objects.get(digest=hash_token(raw))
    assert (token.name, token.project, token.scope, token.expires_at) == ("cli", None, "write", None)


def test_project_scope_days_and_name_end_up_on_the_token(world):
    raw = create_token("bob", "--project", "project-a", "--scope", "read", "--days", "7", "--name", "nightly")

    token = ApiToken.objects.get(digest=hash_token(raw))
    assert token.user == world.bob
    assert token.project == world.project_a
    assert token.scope == "read"
    assert token.read_only
    assert token.name == "nightly"
    assert token.expires_at is not None


def test_a_read_token_from_the_command_cannot_write(world):
    raw = create_token("alice", "--scope", "read")

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.patch(reverse("api:me"), {"first_name": "Mallory"}, format="json").status_code == 403


def test_an_unknown_user_is_a_command_error(world):
    with pytest.raises(CommandError, match="nobody"):
        create_token("nobody")

    assert not ApiToken.objects.exists()


def test_an_unknown_project_is_a_command_error(world):
    with pytest.raises(CommandError, match="no-such-project"):
        create_token("alice", "--project", "no-such-project")

    assert not ApiToken.objects.exists()


def test_a_project_the_user_is_not_in_is_a_command_error(world):
    with pytest.raises(CommandError, match="project"):
        create_token("alice", "--project", "project-b")

    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("days", ["0", "100000"])
def test_days_out_of_range_is_a_command_error(world, days):
    with pytest.raises(CommandError, match="days"):
        create_token("alice", "--days", days)

    assert not ApiToken.objects.exists()


def test_an_unknown_scope_is_a_command_error(world):
    with pytest.raises(CommandError, match="scope"):
        create_token("alice", "--scope", "admin")
