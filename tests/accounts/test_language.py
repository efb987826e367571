"""The interface language: a user's saved choice (profile page, navbar switcher, API profile) applied to every
request, pages and API alike; the cookie and the browser's Accept-Language for everyone else."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import translation

from apps.accounts.models import Notification
from apps.projects import services as project_services
from apps.projects.models import Membership, Role
from tests.conftest import token_client, user_client

PROFILE_URL = reverse("accounts:profile")
LOGIN_URL = reverse("accounts:login")
SWITCH_URL = reverse("set_language")
TOKENS_URL = reverse("accounts:tokens")
DASHBOARD_URL = reverse("projects:dashboard")
NEW_PROJECT = {"slug": "new", "name": "New"}


@pytest.fixture(autouse=True)
def _default_language_afterwards() -> Iterator[None]:
    """A request leaves its language active in this thread: the tests after these expect the default one."""
    yield
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture
def alice_client(world, client) -> Client:
    client.force_login(world.alice)
    return client


def lang_of(response) -> str:
    return re.search(r'<html lang="([^"]+)"', response.content.decode())[1]


def set_language(user, code: str) -> None:
    user.language = code
    user.save(update_fields=["language"])


# --- the saved preference ----------------------------------------------------------------------


def test_the_profile_saves_the_language_and_the_next_page_speaks_it(alice_client, world):
    response = alice_client.post(
        PROFILE_URL, {"first_name": "", "last_name": "", "email": "", "language": "zh-hans"}, follow=True
    )

    world.alice.refresh_from_db()
    assert world.alice.language == "zh-hans"
    assert lang_of(response) == "zh-hans"
    assert "个人资料已保存。" in response.content.decode()


def test_the_profile_offers_each_language_in_its_own_words(alice_client):
    page = alice_client.get(PROFILE_URL).content.decode()

    assert '<option value="zh-hans">简体中文</option>' in page
    assert '<option value="en">English</option>' in page


def test_the_profile_refuses_an_unknown_language(alice_client, world):
    response = alice_client.post(PROFILE_URL, {"first_name": "", "last_name": "", "email": "", "language": "xx"})

    assert response.status_code == 400
    world.alice.refresh_from_db()
    assert world.alice.language == ""


def test_a_saved_language_wins_over_the_cookie_and_the_browser(alice_client, world):
    set_language(world.alice, "zh-hans")
    alice_client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"

    response = alice_client.get(DASHBOARD_URL, HTTP_ACCEPT_LANGUAGE="en")

    assert lang_of(response) == "zh-hans"
    assert response["Content-Language"] == "zh-hans"
    assert "你的项目" in response.content.decode()


@pytest.mark.parametrize(("accept", "expected"), [("zh-CN,zh;q=0.9", "zh-hans"), ("en-US", "en"), ("", "en")])
def test_without_a_saved_language_the_browser_decides(alice_client, accept, expected):
    assert lang_of(alice_client.get(DASHBOARD_URL, HTTP_ACCEPT_LANGUAGE=accept)) == expected


# --- the navbar switcher -----------------------------------------------------------------------


def test_the_switcher_saves_a_signed_in_users_choice_and_the_cookie(alice_client, world):
    response = alice_client.post(SWITCH_URL, {"language": "zh-hans", "next": TOKENS_URL})

    assert response.status_code == 302
    assert response["Location"] == TOKENS_URL
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    world.alice.refresh_from_db()
    assert world.alice.language == "zh-hans"
    assert lang_of(alice_client.get(TOKENS_URL)) == "zh-hans"


def test_the_saved_choice_follows_the_user_to_another_browser(alice_client, world):
    alice_client.post(SWITCH_URL, {"language": "zh-hans", "next": DASHBOARD_URL})
    elsewhere = Client()
    elsewhere.force_login(world.alice)

    assert lang_of(elsewhere.get(DASHBOARD_URL, HTTP_ACCEPT_LANGUAGE="en")) == "zh-hans"


def test_every_page_has_the_switcher_with_the_current_language_selected(alice_client, world):
    set_language(world.alice, "zh-hans")

    page = alice_client.get(TOKENS_URL).content.decode()

    switcher = re.search(r"<form[^>]*data-language-switcher.*?</form>", page, re.S)[0]
    assert f'action="{SWITCH_URL}"' in switcher
    assert f'name="next" value="{TOKENS_URL}"' in switcher
    assert '<option value="zh-hans" lang="zh-hans" selected>简体中文</option>' in switcher
    assert 'aria-label="语言"' in switcher


def test_an_anonymous_visitor_switches_the_login_page_with_the_cookie(db, client):
    login = client.get(LOGIN_URL).content.decode()
    assert "data-language-switcher" in login

    response = client.post(SWITCH_URL, {"language": "zh-hans", "next": LOGIN_URL})

    assert response.status_code == 302
    assert response["Location"] == LOGIN_URL
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    page = client.get(LOGIN_URL)
    assert lang_of(page) == "zh-hans"
    assert "用户名" in page.content.decode()
    assert "密码" in page.content.decode()


def test_the_switcher_refuses_an_unknown_language(alice_client, world):
    response = alice_client.post(SWITCH_URL, {"language": "klingon", "next": DASHBOARD_URL})

    assert response.status_code == 400
    assert settings.LANGUAGE_COOKIE_NAME not in response.cookies
    world.alice.refresh_from_db()
    assert world.alice.language == ""


def test_the_switcher_answers_only_post(client):
    assert client.get(SWITCH_URL, {"language": "zh-hans"}).status_code == 405


# --- the API -----------------------------------------------------------------------------------


def test_api_errors_are_in_the_language_of_the_token_user(world):
    set_language(world.alice, "zh-hans")

    refused = token_client(world.alice, project=world.project_a).post("/api/v1/projects/", NEW_PROJECT, format="json")
    invalid = token_client(world.alice).patch(reverse("api:me"), {"language": "xx"}, format="json")

    assert refused.status_code == 403
    assert refused.json()["detail"] == "项目令牌不能创建项目。"  # ours
    assert refused["Content-Language"] == "zh-hans"
    assert invalid.status_code == 400
    assert invalid.json()["language"] == ["“xx” 不是合法选项。"]  # Django REST framework's


def test_a_token_user_without_a_saved_language_gets_english(world):
    response = token_client(world.alice, project=world.project_a).post("/api/v1/projects/", NEW_PROJECT, format="json")

    assert response.json()["detail"] == "A project token cannot create projects."


def test_api_errors_over_a_session_follow_the_saved_language(alice_client, world):
    set_language(world.alice, "zh-hans")

    response = alice_client.patch(reverse("api:me"), {"language": "xx"}, content_type="application/json")

    assert response.json()["language"] == ["“xx” 不是合法选项。"]


def test_the_api_profile_reads_and_sets_the_language(world):
    api = user_client(world.alice)

    assert api.get(reverse("api:me")).json()["language"] == ""
    assert api.patch(reverse("api:me"), {"language": "zh-hans"}, format="json").status_code == 200
    world.alice.refresh_from_db()
    assert world.alice.language == "zh-hans"
    bad = api.patch(reverse("api:me"), {"language": "xx"}, format="json")
    assert bad.status_code == 400
    assert "language" in bad.json()


# --- words written for someone else ------------------------------------------------------------


def test_a_notification_is_written_in_the_recipients_language(world):
    set_language(world.bob, "zh-hans")
    membership = Membership.objects.get(project=world.project_a, user=world.bob)

    project_services.change_role(membership, world.alice, Role.VIEWER)

    assert Notification.objects.get(user=world.bob).message == "你在 Project A 中的角色现在是查看者。"


def test_a_notification_for_a_user_without_a_saved_language_is_in_english(world):
    membership = Membership.objects.get(project=world.project_a, user=world.bob)

    with translation.override("zh-hans"):  # the actor's language is not the reader's
        project_services.change_role(membership, world.alice, Role.VIEWER)

    assert Notification.objects.get(user=world.bob).message == "Your role in Project A is now Viewer."
