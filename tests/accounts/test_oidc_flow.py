"""Single sign-on against a real OpenID Connect provider (tests/idp, django-oidc-provider) on loopback: the
browser-style authorization-code flow with a requests.Session, from the portal's "Sign in" to logged in."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests

from apps.accounts.models import SsoMembership, User
from apps.projects.models import Membership, Role
from apps.projects.permissions import has_project_perm
from tests.factories import ProjectFactory, UserFactory, add_member
from tests.idp.process import Idp, form_inputs, start_idp

pytestmark = pytest.mark.live

CLIENT_ID = "portal"
CLIENT_SECRET = "portal-test-secret"
PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def idp(tmp_path_factory) -> Iterator[Idp]:
    server = start_idp(tmp_path_factory.mktemp("idp"))
    yield server
    server.stop()


@pytest.fixture
def sso(idp, live_asgi, settings) -> Iterator[tuple[Idp, str]]:
    """The portal on a live server with SSO pointed at the IdP, whose client knows the portal's callback."""
    portal = live_asgi.url
    idp.configure(
        client={
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uris": [f"{portal}/accounts/oidc/callback/"],
            "post_logout_redirect_uris": [f"{portal}/accounts/login/"],
        }
    )
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_OP_DISCOVERY_URL = idp.discovery_url
    settings.OIDC_PROVIDER_NAME = "Test IdP"
    settings.OIDC_GROUP_ROLES = "ml-team=project-a:editor,ml-leads=project-a:admin,vision=project-b:viewer"
    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend",
        "apps.accounts.oidc.PortalOIDCBackend",
        "guardian.backends.ObjectPermissionBackend",
    ]
    owner = UserFactory(username="alice")
    ProjectFactory(owner=owner, slug="project-a", name="Project A")
    ProjectFactory(owner=owner, slug="project-b", name="Project B")
    return idp, portal


def replace_query(url: str, **changes: str | None) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def sso_login(
    idp: Idp, portal: str, username: str, *, nonce: str | None = "keep", state: str | None = None
) -> tuple[requests.Session, requests.Response]:
    """Portal → IdP login form → consent → portal callback, as a browser; returns the callback's response.
    `nonce`: "keep", a replacement value, or None to drop it from the request; `state`: a replacement value."""
    browser = requests.Session()
    start = browser.get(f"{portal}/accounts/oidc/authenticate/", allow_redirects=False)
    assert start.status_code == 302, start.text
    authorize = start.headers["Location"]
    assert authorize.startswith(f"{idp.url}/openid/authorize")
    query = parse_qs(urlsplit(authorize).query)
    assert query["state"][0]
    assert query["nonce"][0]
    assert query["code_challenge"][0]
    if nonce != "keep":
        authorize = replace_query(authorize, nonce=nonce)

    to_login = browser.get(authorize, allow_redirects=False)
    assert to_login.status_code == 302
    assert "/login/" in to_login.headers["Location"]
    login_url = idp.url + to_login.headers["Location"]
    browser.get(login_url).raise_for_status()
    logged_in = browser.post(
        login_url,
        data={
            "username": username,
            "password": PASSWORD,
            "next": parse_qs(urlsplit(login_url).query)["next"][0],
            "csrfmiddlewaretoken": browser.cookies["idp_csrftoken"],
        },
        allow_redirects=False,
    )
    assert logged_in.status_code == 302, "the IdP refused the password"
    consent = browser.get(idp.url + logged_in.headers["Location"])
    assert "Request for Permission" in consent.text
    fields = form_inputs(consent.text) | {"allow": "Authorize"}
    granted = browser.post(f"{idp.url}/openid/authorize", data=fields, allow_redirects=False)
    assert granted.status_code == 302
    callback = granted.headers["Location"]
    assert callback.startswith(f"{portal}/accounts/oidc/callback/?"), callback
    if state is not None:
        callback = replace_query(callback, state=state)
    return browser, browser.get(callback, allow_redirects=False)


def signed_in_as(browser: requests.Session, portal: str) -> str | None:
    response = browser.get(f"{portal}/api/v1/me/")
    return response.json()["username"] if response.status_code == 200 else None


def roles_of(username: str) -> dict[str, int]:
    return dict(Membership.objects.filter(user__username=username).values_list("project__slug", "role"))


def test_a_new_user_lands_in_the_projects_their_groups_map_to(sso) -> None:
    idp, portal = sso
    dana = {"username": "dana", "password": PASSWORD, "email": "dana@example.org", "first_name": "Dana"}
    idp.configure(users=[dana | {"last_name": "Scully", "groups": ["ml-team", "vision", "other"]}])

    browser, callback = sso_login(idp, portal, "dana")

    assert callback.status_code == 302
    assert callback.headers["Location"] == "/"
    assert signed_in_as(browser, portal) == "dana"
    dana = User.objects.get(username="dana")
    assert (dana.email, dana.first_name, dana.last_name) == ("dana@example.org", "Dana", "Scully")
    assert not dana.has_usable_password()
    assert roles_of("dana") == {"project-a": Role.EDITOR, "project-b": Role.VIEWER}
    assert SsoMembership.objects.filter(membership__user=dana).count() == 2
    project_a = Membership.objects.get(user=dana, project__slug="project-a").project
    assert has_project_perm(dana, project_a, "change_project") is False  # editors do not edit the project itself
    assert has_project_perm(dana, project_a, "view_project")
    dashboard = browser.get(f"{portal}/")
    assert dashboard.status_code == 200
    assert "Project A" in dashboard.text
    assert "Project B" in dashboard.text


def test_a_later_login_follows_the_changed_groups_and_keeps_manual_memberships(sso) -> None:
    idp, portal = sso
    idp.configure(users=[{"username": "erin", "password": PASSWORD, "groups": ["ml-team", "vision"]}])
    sso_login(idp, portal, "erin")
    erin = User.objects.get(username="erin")
    manual = ProjectFactory(owner=User.objects.get(username="alice"), slug="project-c", name="Project C")
    add_member(manual, erin, Role.VIEWER)

    idp.configure(users=[{"username": "erin", "password": PASSWORD, "groups": ["ml-leads"]}])
    browser, callback = sso_login(idp, portal, "erin")

    assert callback.status_code == 302
    assert signed_in_as(browser, portal) == "erin"
    assert roles_of("erin") == {"project-a": Role.ADMIN, "project-c": Role.VIEWER}
    project_a = Membership.objects.get(user=erin, project__slug="project-a").project
    assert has_project_perm(erin, project_a, "manage_members")
    assert not SsoMembership.objects.filter(membership__project=manual).exists()


def test_a_tampered_state_is_refused(sso) -> None:
    idp, portal = sso
    idp.configure(users=[{"username": "frank", "password": PASSWORD, "groups": ["ml-team"]}])

    browser, callback = sso_login(idp, portal, "frank", state="forged-state")

    assert callback.status_code == 400
    assert signed_in_as(browser, portal) is None
    assert not User.objects.filter(username="frank").exists()


@pytest.mark.parametrize("nonce", ["forged-nonce", None], ids=["tampered", "absent"])
def test_an_id_token_without_the_sent_nonce_is_refused(sso, nonce) -> None:
    idp, portal = sso
    idp.configure(users=[{"username": "grace", "password": PASSWORD, "groups": ["ml-team"]}])

    browser, callback = sso_login(idp, portal, "grace", nonce=nonce)

    assert callback.status_code == 400
    assert signed_in_as(browser, portal) is None
    assert not User.objects.filter(username="grace").exists()


def test_sso_works_with_password_login_disabled_and_logout_ends_the_idp_session(sso, settings) -> None:
    idp, portal = sso
    settings.PORTAL_PASSWORD_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = settings.AUTHENTICATION_BACKENDS[1:]
    idp.configure(users=[{"username": "heidi", "password": PASSWORD, "groups": []}])
    browser = requests.Session()
    page = browser.get(f"{portal}/accounts/login/")
    assert "Sign in with Test IdP" in page.text
    assert 'name="password"' not in page.text
    refused = browser.post(f"{portal}/accounts/login/", data={"username": "alice", "password": "x"})
    assert refused.status_code == 403

    browser, _callback = sso_login(idp, portal, "heidi")
    assert signed_in_as(browser, portal) == "heidi"
    assert roles_of("heidi") == {}

    logout = browser.post(
        f"{portal}/accounts/logout/", headers={"X-CSRFToken": browser.cookies["csrftoken"]}, allow_redirects=False
    )
    assert logout.status_code == 302
    end_session = logout.headers["Location"]
    assert end_session.startswith(f"{idp.url}/openid/end-session?")
    assert "id_token_hint=" in end_session
    back = browser.get(end_session, allow_redirects=False)
    assert back.status_code == 302
    assert back.headers["Location"] == f"{portal}/accounts/login/"
    assert signed_in_as(browser, portal) is None
    # The IdP forgot the session too: a new authorization asks for the password again.
    start = browser.get(f"{portal}/accounts/oidc/authenticate/", allow_redirects=False)
    again = browser.get(start.headers["Location"], allow_redirects=False)
    assert again.status_code == 302
    assert "/login/" in again.headers["Location"]
