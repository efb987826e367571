"""Security hardening: CSRF, cookies, HSTS, the Content-Security-Policy, login lockout, rate limits, redirects, sizes.

Tests that hit a rate limit use a client address of their own (REMOTE_ADDR), so that they never use up the
limit of the other tests, which all come from 127.0.0.1 (with Redis, the count is shared by the xdist workers).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from apps.accounts.models import ApiToken
from tests.factories import UserFactory

LOGIN_URL = reverse("accounts:login")
TOKENS_URL = reverse("accounts:tokens")
TOKENS_API = reverse("api:token-list")
ROOT = Path(settings.BASE_DIR)


pytestmark = pytest.mark.usefixtures("fresh_rate_counts")


def settings_in_subprocess(env: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    """Import portal.settings in a fresh interpreter with `env` (nothing inherited but PATH) and print `names`."""
    code = (
        "import json, portal.settings as s; "
        f"print(json.dumps({{n: getattr(s, n, None) for n in {list(names)!r}}}, default=str))"
    )
    base = {"PATH": os.environ["PATH"], "PORTAL_VAR_DIR": settings.VAR_DIR.as_posix()}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def csp_directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


# --- SECRET_KEY, cookies, HSTS, proxy header (settings read from the environment) -----------------------------


def test_settings_refuse_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = settings_in_subprocess({"PORTAL_VAR_DIR": str(tmp_path), "DEBUG": "false"}, "SECRET_KEY")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY" in result.stderr


def test_settings_accept_a_missing_secret_key_only_with_debug(tmp_path):
    result = settings_in_subprocess({"PORTAL_VAR_DIR": str(tmp_path), "DEBUG": "true"}, "SECRET_KEY")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["SECRET_KEY"].startswith("insecure-")


@pytest.mark.parametrize(
    ("site_url", "debug", "secure"),
    [
        ("https://portal.example", "false", True),
        ("http://127.0.0.1:8000", "false", False),
        ("https://portal.example", "true", False),
    ],
)
def test_cookies_are_secure_when_debug_is_off_and_the_site_is_served_over_https(site_url, debug, secure):
    names = ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "SESSION_COOKIE_SAMESITE")
    result = settings_in_subprocess({"SECRET_KEY": "k" * 50, "DEBUG": debug, "SITE_URL": site_url}, *names)

    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["SESSION_COOKIE_SECURE"] is secure
    assert values["CSRF_COOKIE_SECURE"] is secure
    assert values["SESSION_COOKIE_HTTPONLY"] is True
    assert values["SESSION_COOKIE_SAMESITE"] == "Lax"


def test_hsts_and_the_proxy_ssl_header_come_from_the_environment():
    env = {"SECRET_KEY": "k" * 50, "PORTAL_HSTS_SECONDS": "31536000", "PORTAL_PROXY_SSL_HEADER": "X-Forwarded-Proto"}
    result = settings_in_subprocess(env, "SECURE_HSTS_SECONDS", "SECURE_PROXY_SSL_HEADER")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


@override_settings(SECURE_HSTS_SECONDS=3600, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_hsts_is_sent_on_requests_the_proxy_marks_as_https(db, client):
    behind_tls = client.get(LOGIN_URL, headers={"x-forwarded-proto": "https"})
    plain = client.get(LOGIN_URL)

    assert behind_tls["Strict-Transport-Security"] == "max-age=3600"
    assert "Strict-Transport-Security" not in plain  # browsers ignore HSTS over HTTP; Django sends none


def test_session_cookie_is_httponly_and_samesite(world, client, password):
    client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.0.0.1")

    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"


# --- CSRF ----------------------------------------------------------------------------------------------------


def test_a_session_authenticated_api_write_needs_the_csrf_token(world):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.alice)

    refused = client.post(TOKENS_API, {"name": "no-csrf", "scope": "read"}, format="json")
    client.get(reverse("accounts:profile"))  # sets the csrftoken cookie
    allowed = client.post(
        TOKENS_API,
        {"name": "with-csrf", "scope": "read"},
        format="json",
        headers={"x-csrftoken": client.cookies["csrftoken"].value},
    )

    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert allowed.status_code == 201
    assert list(ApiToken.objects.filter(user=world.alice).values_list("name", flat=True)) == ["with-csrf"]


def test_the_login_form_needs_the_csrf_token(world, password):
    client = Client(enforce_csrf_checks=True)

    response = client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.0.0.2")

    assert response.status_code == 403
    assert SESSION_KEY not in client.session


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_websocket_from_another_origin_is_refused(live_asgi, world):
    cookie = session_cookie(world.alice)

    def handshake(origin: str) -> int:
        headers = {"Origin": origin, "Cookie": cookie}
        try:
            with connect(f"{live_asgi.ws_url}/ws/notifications/", additional_headers=headers, open_timeout=30):
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    assert handshake("https://evil.example") == 403  # a page elsewhere cannot ride the user's session cookie
    assert handshake(live_asgi.url) == 101


# --- Content-Security-Policy -------------------------------------------------------------------------------------


def test_pages_carry_a_csp_without_inline_scripts(db, client):
    directives = csp_directives(client.get(LOGIN_URL))

    assert directives["default-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["form-action"] == ["'self'"]
    # Only 'self': a nonce is added on the pages whose template uses one (the next test).
    assert directives["script-src"] == ["'self'"]


def test_an_inline_script_carries_the_nonce_of_its_response(world, client):
    from apps.datasets.models import Dataset

    client.force_login(world.alice)
    dataset = Dataset.objects.create(project=world.project_a, name="faces")
    response = client.get(reverse("datasets:dataset-upload", kwargs={"project": "project-a", "pk": dataset.pk}))

    assert response.status_code == 200
    nonce = next(s for s in csp_directives(response)["script-src"] if s.startswith("'nonce-"))[7:-1]
    inline = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", response.content.decode())
    assert inline == [f' nonce="{nonce}"']


def test_no_template_has_inline_event_handlers_or_unnonced_inline_scripts():
    offenders = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        for match in re.finditer(r"<script\b[^>]*>|\son[a-z]+\s*=|javascript:", text):
            tag = match.group(0)
            if tag.startswith("<script") and ("src=" in tag or "nonce=" in tag):
                continue
            offenders.append(f"{path.relative_to(ROOT)}: {tag}")
    assert offenders == []


def test_the_api_docs_page_works_under_the_policy(db, client):
    page = client.get(reverse("api:docs"))
    html = page.content.decode()
    script_url = re.search(r'<script src="([^"]*script=[^"]*)"', html).group(1).replace("&amp;", "&")
    script = client.get(script_url)

    assert page.status_code == 200
    assert re.findall(r"<script(?![^>]*\bsrc=)", html) == []  # Swagger UI's init script is a URL, not inline
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


def test_the_csp_lets_the_login_form_post_to_the_identity_provider_origin():
    env = {"SECRET_KEY": "k" * 50, "OIDC_OP_LOGOUT_ENDPOINT": "https://idp.example:8443/logout?x=1"}
    result = settings_in_subprocess(env, "CONTENT_SECURITY_POLICY")

    assert result.returncode == 0, result.stderr
    form_action = json.loads(result.stdout)["CONTENT_SECURITY_POLICY"]["DIRECTIVES"]["form-action"]
    assert form_action == ["'self'", "https://idp.example:8443"]


# --- login brute force (django-axes) and rate limits ------------------------------------------------------------


@override_settings(AXES_FAILURE_LIMIT=3)
def test_repeated_failed_logins_lock_that_username_from_that_address(world, client, password):
    failures = [
        client.post(LOGIN_URL, {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.1.0.1").status_code
        for _ in range(3)
    ]
    locked = client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.1.0.1")
    elsewhere = Client().post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.1.0.2")

    assert failures[:2] == [200, 200]
    assert failures[2] == 429  # the third failure reaches the limit
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert "Too many failed logins" in locked.content.decode()
    assert SESSION_KEY not in client.session
    assert elsewhere.status_code == 302  # the same user from another address is not locked out


@override_settings(AXES_FAILURE_LIMIT=3)
def test_a_successful_login_resets_the_failure_count(world, client, password):
    for _ in range(2):
        client.post(LOGIN_URL, {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.1.1.1")
    client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.1.1.1")
    client.logout()
    again = [
        client.post(LOGIN_URL, {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.1.1.1").status_code
        for _ in range(2)
    ]

    assert again == [200, 200]


@override_settings(PORTAL_LOGIN_RATE="3/minute")
def test_login_posts_are_rate_limited_per_address(world, client, password):
    statuses = [
        Client().post(LOGIN_URL, {"username": f"u{n}", "password": "x"}, REMOTE_ADDR="10.2.0.1").status_code
        for n in range(3)
    ]
    limited = client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.2.0.1")
    other_address = Client().post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR="10.2.0.2")
    page = Client().get(LOGIN_URL, REMOTE_ADDR="10.2.0.1")

    assert statuses == [200, 200, 200]
    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert SESSION_KEY not in client.session
    assert other_address.status_code == 302
    assert page.status_code == 200  # showing the form is not an attempt


@override_settings(PORTAL_LOGIN_RATE="2/minute")
def test_the_login_rate_limit_wraps_the_login_view(world, rf, password):
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.sessions.middleware import SessionMiddleware

    from apps.accounts.oidc import LoginView
    from apps.accounts.throttles import login_rate_limited

    view = login_rate_limited(LoginView.as_view())

    def attempt(address: str):
        request = rf.post(LOGIN_URL, {"username": "alice", "password": "wrong"}, REMOTE_ADDR=address)
        request._dont_enforce_csrf_checks = True
        SessionMiddleware(lambda r: None).process_request(request)
        request.user = AnonymousUser()
        return view(request)

    statuses = [attempt("10.2.2.1").status_code for _ in range(3)]

    assert statuses[:2] == [200, 200]  # the form again, with its error
    assert statuses[2] == 429
    assert attempt("10.2.2.2").status_code == 200


def test_forged_forwarded_for_headers_do_not_escape_the_login_limit(world):
    with override_settings(PORTAL_LOGIN_RATE="1/minute"):
        first = Client().post(LOGIN_URL, {"username": "a", "password": "x"}, REMOTE_ADDR="10.2.1.1")
        forged = Client().post(
            LOGIN_URL, {"username": "a", "password": "x"}, REMOTE_ADDR="10.2.1.1", HTTP_X_FORWARDED_FOR="1.2.3.4"
        )

    assert first.status_code == 200
    assert forged.status_code == 429


@override_settings(PORTAL_TOKEN_CREATE_RATE="2/hour")
def test_token_creation_through_the_api_is_rate_limited_per_user(world):
    alice, bob = APIClient(), APIClient()
    alice.force_authenticate(world.alice)
    bob.force_authenticate(world.bob)

    created = [alice.post(TOKENS_API, {"name": f"t{n}", "scope": "read"}, format="json") for n in range(2)]
    limited = alice.post(TOKENS_API, {"name": "t3", "scope": "read"}, format="json")
    listing = alice.get(TOKENS_API)
    other_user = bob.post(TOKENS_API, {"name": "b1", "scope": "read"}, format="json")

    assert [r.status_code for r in created] == [201, 201]
    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 3600
    assert ApiToken.objects.filter(user=world.alice).count() == 2
    assert listing.status_code == 200  # reading is not creating
    assert other_user.status_code == 201


@override_settings(PORTAL_TOKEN_CREATE_RATE="1/hour")
def test_token_creation_on_the_page_is_rate_limited(world, client):
    client.force_login(world.alice)

    first = client.post(TOKENS_URL, {"name": "ci", "scope": "write"})
    second = client.post(TOKENS_URL, {"name": "ci2", "scope": "write"})

    assert first.status_code == 200
    assert second.status_code == 429
    assert int(second["Retry-After"]) > 0
    assert list(ApiToken.objects.filter(user=world.alice).values_list("name", flat=True)) == ["ci"]
    assert client.get(TOKENS_URL).status_code == 200


# --- passwords, redirects, request sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize("weak", ["short1", "password123", "12345678901", "alice-smith-1"])
def test_weak_passwords_are_refused(db, weak):
    user = UserFactory.build(username="alice-smith", first_name="Alice", last_name="Smith")

    with pytest.raises(ValidationError):
        validate_password(weak, user)


def test_a_strong_password_passes(db):
    validate_password("violet-canyon-marmot-42", UserFactory.build(username="alice"))


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/", "/\\evil.example/", "http:evil.example", "\\\\evil.example"]
)
def test_login_never_redirects_to_another_host(world, client, password, target):
    response = client.post(
        LOGIN_URL, {"username": "alice", "password": password, "next": target}, REMOTE_ADDR="10.3.0.1"
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("projects:dashboard")


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/"])
def test_the_language_switch_never_redirects_to_another_host(db, client, target):
    response = client.post(reverse("set_language"), {"language": "en", "next": target})

    assert response.status_code == 302
    assert response["Location"] == "/"


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_form_body_over_the_limit_is_refused(world, client):
    client.force_login(world.alice)

    response = client.post(reverse("accounts:profile"), {"first_name": "x" * 2000})

    assert response.status_code == 400
    world.alice.refresh_from_db()
    assert world.alice.first_name != "x" * 2000


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_an_api_body_over_the_limit_is_refused(world):
    client = APIClient()
    client.force_authenticate(world.alice)

    response = client.post(TOKENS_API, {"name": "x" * 2000, "scope": "read"}, format="json")

    assert response.status_code in (400, 413)
    assert not ApiToken.objects.filter(user=world.alice).exists()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1024)
def test_dataset_upload_chunks_are_not_capped_by_the_body_limit(world):
    from apps.datasets.models import DatasetVersion
    from tests.conftest import user_client
    from tests.datasets.helpers import upload_version
    from tests.factories import dataset

    content = bytes(range(256)) * 64  # 16 KiB in one chunk, 16 times the body limit
    client = user_client(world.alice)

    version = upload_version(client, world.project_a, dataset(world.project_a, world.alice), {"a.bin": content}, 20_000)

    stored = DatasetVersion.objects.get(pk=version["id"]).files.get()
    assert (stored.path, stored.size) == ("a.bin", len(content))
