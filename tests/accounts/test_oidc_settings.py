"""Single sign-on without a provider: the group mapping, the membership sync rules, the system checks, the
login page and password login switched off."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts.models import SsoMembership
from apps.accounts.oidc import check_oidc_settings, parse_group_roles, provider_logout_url
from apps.accounts.services import sync_sso_memberships
from apps.projects.models import Membership, Role
from apps.projects.permissions import has_project_perm
from tests.factories import PASSWORD, UserFactory

MAPPING = {
    "team": [("project-a", Role.EDITOR)],
    "leads": [("project-a", Role.ADMIN)],
    "b": [("project-b", Role.VIEWER)],
}


def test_it_parses_the_group_mapping() -> None:
    assert parse_group_roles(" ml=project-a:Editor, /org/x=y=project-b:viewer,ml=project-b:admin ,") == {
        "ml": [("project-a", Role.EDITOR), ("project-b", Role.ADMIN)],
        "/org/x=y": [("project-b", Role.VIEWER)],
    }
    assert parse_group_roles("") == {}


@pytest.mark.parametrize("text", ["ml", "ml=project-a", "=project-a:viewer", "ml=:viewer", "ml=project-a:boss"])
def test_it_rejects_a_malformed_mapping(text) -> None:
    with pytest.raises(ValueError, match=r"ml|project-a|viewer"):
        parse_group_roles(text)


def ids(settings) -> list[str]:
    return [message.id for message in check_oidc_settings()]


def test_checks_are_quiet_when_sso_is_off_or_complete(settings) -> None:
    assert ids(settings) == []
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "portal", "s"
    settings.OIDC_OP_DISCOVERY_URL = "https://idp.example/.well-known/openid-configuration"
    settings.OIDC_GROUP_ROLES = "ml=project-a:editor"
    assert ids(settings) == []


def test_checks_report_half_configured_sso(settings) -> None:
    settings.OIDC_OP_DISCOVERY_URL = "https://idp.example/.well-known/openid-configuration"
    assert ids(settings) == ["portal.E020"]  # endpoints without a client id
    settings.OIDC_OP_DISCOVERY_URL = ""
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_OP_TOKEN_ENDPOINT = "https://idp.example/token"
    settings.OIDC_GROUP_ROLES = "ml=project-a"
    messages = check_oidc_settings()
    assert [m.id for m in messages] == ["portal.E020", "portal.E021", "portal.E022"]
    assert "OIDC_OP_AUTHORIZATION_ENDPOINT" in messages[1].msg
    assert "OIDC_OP_JWKS_ENDPOINT" in messages[1].msg
    assert "OIDC_OP_TOKEN_ENDPOINT" not in messages[1].msg


def test_checks_refuse_a_portal_nobody_can_sign_in_to(settings) -> None:
    settings.PORTAL_PASSWORD_LOGIN = False
    assert ids(settings) == ["portal.E023"]


@pytest.fixture
def people(world):
    return world, UserFactory(username="dana")


def test_sync_grants_the_highest_mapped_role_with_guardian_grants(people) -> None:
    world, dana = people
    granted = sync_sso_memberships(dana, ["team", "leads", "unknown"], MAPPING)
    assert granted == {"project-a": Role.ADMIN}
    assert has_project_perm(dana, world.project_a, "manage_members")
    assert SsoMembership.objects.get(membership__user=dana).groups == "leads,team"


def test_sync_downgrades_and_removes_only_what_it_granted(people) -> None:
    world, dana = people
    sync_sso_memberships(dana, ["leads", "b"], MAPPING)
    sync_sso_memberships(dana, ["team"], MAPPING)
    assert dict(Membership.objects.filter(user=dana).values_list("project__slug", "role")) == {"project-a": Role.EDITOR}
    assert not has_project_perm(dana, world.project_a, "manage_members")
    assert not has_project_perm(dana, world.project_b, "view_project")  # guardian grants went with the membership


def test_sync_never_touches_a_manual_membership(people) -> None:
    world, _dana = people
    bob = world.bob  # an editor of project A, added by a person
    assert sync_sso_memberships(bob, ["leads"], MAPPING) == {}
    assert sync_sso_memberships(bob, [], MAPPING) == {}
    assert Membership.objects.get(user=bob, project=world.project_a).role == Role.EDITOR
    assert not SsoMembership.objects.exists()


def test_sync_keeps_the_last_owner(people) -> None:
    world, dana = people
    sync_sso_memberships(dana, ["owners"], {"owners": [("project-b", Role.OWNER)]})
    Membership.objects.filter(user=world.charlie, project=world.project_b).delete()  # dana is now the only owner
    sync_sso_memberships(dana, [], {"owners": [("project-b", Role.OWNER)]})
    assert Membership.objects.get(user=dana, project=world.project_b).role == Role.OWNER


def test_the_sso_routes_are_absent_while_sso_is_off(client: Client) -> None:
    assert client.get(reverse("accounts:oidc-authenticate")).status_code == 404
    assert client.get(reverse("accounts:oidc-callback"), {"code": "c", "state": "s"}).status_code == 404
    page = client.get(reverse("accounts:login"))
    assert 'name="password"' in page.content.decode()
    assert "Sign in with" not in page.content.decode()


def test_the_login_page_offers_sso_and_keeps_next(client: Client, settings) -> None:
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_PROVIDER_NAME = "portal", "Keycloak"
    html = client.get(reverse("accounts:login"), {"next": "/p/project-a/"}).content.decode()
    assert "Sign in with Keycloak" in html
    assert f'href="{reverse("accounts:oidc-authenticate")}?next=%2Fp%2Fproject-a%2F"' in html
    assert 'name="password"' in html


def test_an_unreachable_provider_returns_to_the_login_page(client: Client, settings) -> None:
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "portal", "s"
    settings.OIDC_OP_DISCOVERY_URL = "http://127.0.0.1:9/.well-known/openid-configuration"  # discard port: refused
    response = client.get(reverse("accounts:oidc-authenticate"), follow=True)
    assert response.redirect_chain == [(reverse("accounts:login"), 302)]
    assert "cannot be reached" in response.content.decode()


def test_password_login_disabled_refuses_every_password(client: Client, settings, world) -> None:
    settings.PORTAL_PASSWORD_LOGIN = False
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.AUTHENTICATION_BACKENDS = [
        "apps.accounts.oidc.PortalOIDCBackend",
        "guardian.backends.ObjectPermissionBackend",
    ]
    world.alice.is_staff = world.alice.is_superuser = True
    world.alice.save()
    html = client.get(reverse("accounts:login")).content.decode()
    assert 'name="password"' not in html
    assert "Sign in with" in html
    assert client.post(reverse("accounts:login"), {"username": "alice", "password": PASSWORD}).status_code == 403
    admin = client.post(reverse("admin:login"), {"username": "alice", "password": PASSWORD})
    assert admin.status_code == 200
    assert "_auth_user_id" not in client.session


def test_logout_stays_local_without_an_sso_session(rf, settings) -> None:
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_OP_LOGOUT_ENDPOINT = "https://idp.example/logout"
    request = rf.post("/accounts/logout/")
    request.session = {}
    assert provider_logout_url(request) == reverse("accounts:login")
    request.session = {"oidc_id_token": "a.b.c"}
    assert provider_logout_url(request) == (
        "https://idp.example/logout?id_token_hint=a.b.c&post_logout_redirect_uri=http%3A%2F%2Ftestserver%2Faccounts%2Flogin%2F"
    )
