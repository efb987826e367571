"""The account pages: login/logout, profile, API tokens and notifications."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import SESSION_KEY
from django.test import Client
from django.urls import reverse

from apps.accounts.models import ApiToken, Notification, hash_token
from apps.accounts.services import create_token, notify
from tests.factories import UserFactory

LOGIN_URL = reverse("accounts:login")
TOKENS_URL = reverse("accounts:tokens")
PROFILE_URL = reverse("accounts:profile")
NOTIFICATIONS_URL = reverse("accounts:notifications")
RAW_TOKEN = re.compile(r"mlp_[A-Za-z0-9_-]{40,}")


@pytest.fixture
def alice_client(world, client) -> Client:
    client.force_login(world.alice)
    return client


# --- login / logout ---------------------------------------------------------------------------


def test_login_page_renders_a_form(db, client):
    response = client.get(LOGIN_URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert f'action="{LOGIN_URL}"' in html
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_login_with_the_right_password_goes_to_the_dashboard(world, client, password):
    response = client.post(LOGIN_URL, {"username": "alice", "password": password})

    assert response.status_code == 302
    assert response["Location"] == reverse("projects:dashboard")
    assert client.session[SESSION_KEY] == str(world.alice.pk)


def test_login_honours_a_safe_next_url(world, client, password):
    response = client.post(LOGIN_URL, {"username": "alice", "password": password, "next": PROFILE_URL})

    assert response["Location"] == PROFILE_URL


def test_login_ignores_an_offsite_next_url(world, client, password):
    response = client.post(LOGIN_URL, {"username": "alice", "password": password, "next": "https://evil.example/"})

    assert response["Location"] == reverse("projects:dashboard")


def test_login_with_a_wrong_password_shows_the_error(world, client):
    response = client.post(LOGIN_URL, {"username": "alice", "password": "wrong"})

    assert response.status_code == 200
    assert "match" in response.content.decode()
    assert 'role="alert"' in response.content.decode()
    assert SESSION_KEY not in client.session


def test_an_inactive_user_cannot_log_in(world, client, password):
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])

    client.post(LOGIN_URL, {"username": "alice", "password": password})

    assert SESSION_KEY not in client.session


def test_logout_by_post_logs_out(alice_client):
    response = alice_client.post(reverse("accounts:logout"))

    assert response.status_code == 302
    assert response["Location"] == LOGIN_URL
    assert SESSION_KEY not in alice_client.session
    assert alice_client.get(PROFILE_URL).status_code == 302


def test_logout_by_get_is_refused(alice_client):
    assert alice_client.get(reverse("accounts:logout")).status_code == 405
    assert SESSION_KEY in alice_client.session


@pytest.mark.parametrize("url", [PROFILE_URL, TOKENS_URL, NOTIFICATIONS_URL])
def test_account_pages_send_anonymous_users_to_login(db, client, url):
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith(f"{LOGIN_URL}?next=")


# --- profile ----------------------------------------------------------------------------------


def test_profile_page_shows_the_current_values(alice_client):
    response = alice_client.get(PROFILE_URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert "alice@example.com" in html
    assert 'name="first_name"' in html


def test_profile_saves_names_and_email(alice_client, world):
    response = alice_client.post(
        PROFILE_URL, {"first_name": "Alice", "last_name": "Liddell", "email": "alice@wonderland.example"}
    )

    assert response.status_code == 302
    assert response["Location"] == PROFILE_URL
    world.alice.refresh_from_db()
    assert (world.alice.first_name, world.alice.last_name, world.alice.email) == (
        "Alice",
        "Liddell",
        "alice@wonderland.example",
    )
    assert "Profile saved." in alice_client.get(PROFILE_URL).content.decode()


@pytest.mark.parametrize("email", ["bob@example.com", "BOB@Example.com"])
def test_profile_rejects_an_email_used_by_another_account(alice_client, world, email):
    response = alice_client.post(PROFILE_URL, {"first_name": "Alice", "last_name": "", "email": email})

    assert response.status_code == 400
    assert response.context["form"].errors == {"email": ["Another account uses this email."]}
    assert "Another account uses this email." in response.content.decode()
    world.alice.refresh_from_db()
    assert world.alice.email == "alice@example.com"
    assert world.alice.first_name == ""


def test_profile_keeps_my_own_email_in_another_case(alice_client, world):
    response = alice_client.post(PROFILE_URL, {"first_name": "", "last_name": "", "email": "ALICE@example.com"})

    assert response.status_code == 302
    world.alice.refresh_from_db()
    assert world.alice.email == "ALICE@example.com"


def test_profile_allows_a_blank_email_even_when_others_have_none(alice_client, world):
    UserFactory(username="no-mail", email="")

    response = alice_client.post(PROFILE_URL, {"first_name": "", "last_name": "", "email": ""})

    assert response.status_code == 302
    world.alice.refresh_from_db()
    assert world.alice.email == ""


# --- tokens -----------------------------------------------------------------------------------


def test_tokens_page_lists_my_tokens_by_prefix_only(alice_client, world):
    mine, raw = create_token(world.alice, name="laptop")
    create_token(world.bob, name="bob's laptop")

    html = alice_client.get(TOKENS_URL).content.decode()

    assert "laptop" in html
    assert mine.prefix in html
    assert raw not in html
    assert "bob&#x27;s laptop" not in html
    assert "bob's laptop" not in html


def test_creating_a_token_shows_the_raw_token_once(alice_client, world):
    response = alice_client.post(TOKENS_URL, {"name": "ci", "project": "project-a", "scope": "read", "days": "30"})

    assert response.status_code == 200
    shown = RAW_TOKEN.findall(response.content.decode())
    assert len(set(shown)) == 1
    raw = shown[0]
    assert response.context["new_token"] == raw
    token = ApiToken.objects.get(user=world.alice)
    assert token.digest == hash_token(raw)
    assert (token.name, token.project, token.scope) == ("ci", world.project_a, "read")
    assert token.expires_at is not None

    reloaded = alice_client.get(TOKENS_URL).content.decode()
    assert raw not in reloaded
    assert RAW_TOKEN.search(reloaded) is None
    assert token.prefix in reloaded


def test_creating_a_token_resets_the_form(alice_client):
    response = alice_client.post(TOKENS_URL, {"name": "ci", "scope": "write"})

    assert response.context["form"].is_bound is False


@pytest.mark.parametrize("days", ["0", "-1", "100000", "soon"])
def test_creating_a_token_with_invalid_days_is_400_with_the_error(alice_client, days):
    response = alice_client.post(TOKENS_URL, {"name": "ci", "scope": "write", "days": days})

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["days"]
    assert response.context["form"].errors["days"][0] in response.content.decode()
    assert response.context["new_token"] is None
    assert not ApiToken.objects.exists()


def test_creating_a_token_for_a_project_i_am_not_in_is_400(alice_client):
    response = alice_client.post(TOKENS_URL, {"name": "ci", "scope": "write", "project": "project-b"})

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["project"]
    assert not ApiToken.objects.exists()


def test_revoking_from_the_page_revokes(alice_client, world):
    token, raw = create_token(world.alice, name="laptop")

    response = alice_client.post(reverse("accounts:token-revoke", kwargs={"pk": token.pk}), follow=True)

    assert response.redirect_chain == [(TOKENS_URL, 302)]
    token.refresh_from_db()
    assert token.revoked_at is not None
    html = response.content.decode()
    assert "revoked" in html
    assert reverse("accounts:token-revoke", kwargs={"pk": token.pk}) not in html
    assert Client().get(reverse("api:me"), HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_revoking_needs_a_post(alice_client, world):
    token, _raw = create_token(world.alice, name="laptop")

    response = alice_client.get(reverse("accounts:token-revoke", kwargs={"pk": token.pk}))

    assert response.status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoking_someone_elses_token_is_404(alice_client, world):
    token, _raw = create_token(world.bob, name="bob's")

    response = alice_client.post(reverse("accounts:token-revoke", kwargs={"pk": token.pk}))

    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


# --- notifications ----------------------------------------------------------------------------


def test_notifications_page_lists_my_notifications(alice_client, world):
    notify(world.alice, "bob joined Project A", url="/p/project-a/")
    notify(world.alice, "quota raised")
    notify(world.bob, "for bob only")

    response = alice_client.get(NOTIFICATIONS_URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert '<a href="/p/project-a/">bob joined Project A</a>' in html
    assert "quota raised" in html
    assert "for bob only" not in html
    assert response.context["unread_notifications"] == 2


def test_notifications_page_says_when_there_are_none(alice_client):
    assert "Nothing yet." in alice_client.get(NOTIFICATIONS_URL).content.decode()


def test_mark_all_read_marks_only_my_notifications(alice_client, world):
    mine = [notify(world.alice, "one"), notify(world.alice, "two")]
    bobs = notify(world.bob, "bob's")

    response = alice_client.post(NOTIFICATIONS_URL)

    assert response.status_code == 302
    assert response["Location"] == NOTIFICATIONS_URL
    assert not Notification.objects.filter(pk__in=[n.pk for n in mine], read_at__isnull=True).exists()
    bobs.refresh_from_db()
    assert bobs.read_at is None
    assert alice_client.get(NOTIFICATIONS_URL).context["unread_notifications"] == 0
