"""/metrics names projects and services: only a platform admin's session or the scrape token
(PORTAL_METRICS_TOKEN, for Prometheus) read it (issue 27)."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from tests.factories import UserFactory, make_token

SCRAPE_TOKEN = "scrape-" + "x" * 40


@pytest.fixture
def staff(db):
    return UserFactory(username="root", is_staff=True)


def _metrics(client: Client, **headers: str):
    return client.get("/metrics", headers=headers)


def assert_metrics(response) -> None:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "# TYPE django_http_requests_total_by_method_total counter" in response.content.decode()


@override_settings(PORTAL_METRICS_TOKEN=SCRAPE_TOKEN)
def test_anonymous_requests_get_401_with_a_challenge_and_no_metrics(db):
    response = _metrics(Client())

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"django_http" not in response.content


@override_settings(PORTAL_METRICS_TOKEN=SCRAPE_TOKEN)
def test_the_scrape_token_reads_the_metrics(db):
    assert_metrics(_metrics(Client(), authorization=f"Bearer {SCRAPE_TOKEN}"))


@override_settings(PORTAL_METRICS_TOKEN=SCRAPE_TOKEN)
def test_a_wrong_token_or_a_users_api_token_is_refused(world):
    for value in (f"Bearer {SCRAPE_TOKEN}x", "Bearer ", f"Basic {SCRAPE_TOKEN}", f"Bearer {make_token(world.alice)}"):
        response = _metrics(Client(), authorization=value)
        assert response.status_code == 401, value
        assert b"django_http" not in response.content


@override_settings(PORTAL_METRICS_TOKEN="")
def test_without_a_configured_token_no_bearer_is_accepted(db):
    assert _metrics(Client(), authorization="Bearer ").status_code == 401


def test_a_platform_admins_session_reads_the_metrics(staff):
    client = Client()
    client.force_login(staff)
    assert_metrics(_metrics(client))


def test_a_signed_in_user_who_is_not_a_platform_admin_gets_403(world):
    client = Client()
    client.force_login(world.alice)  # owner of a project, not staff
    response = _metrics(client)

    assert response.status_code == 403
    assert b"django_http" not in response.content


def test_a_short_scrape_token_is_refused_at_start():
    from tests.portal.test_hardening import settings_in_subprocess

    result = settings_in_subprocess({"SECRET_KEY": "k" * 50, "PORTAL_METRICS_TOKEN": "short"}, "PORTAL_METRICS_TOKEN")

    assert result.returncode != 0
    assert "PORTAL_METRICS_TOKEN" in result.stderr
    assert "short" not in result.stderr.split("ImproperlyConfigured")[-1]  # the value is never echoed
