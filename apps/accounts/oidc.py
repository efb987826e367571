"""Single sign-on with OpenID Connect (mozilla-django-oidc), configured only by `OIDC_*` environment variables.

SSO is on when `OIDC_RP_CLIENT_ID` is set. The provider's endpoints come from `OIDC_OP_DISCOVERY_URL` (fetched
at the first login, not at start-up, and cached) unless given one by one. Each login creates or updates the
user from the claims and makes their SSO-granted project memberships follow the groups claim
(`OIDC_GROUP_ROLES`, see `apps.accounts.services.sync_sso_memberships`). See docs/sso.md.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.core import checks
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from apps.accounts.services import sync_sso_memberships
from apps.projects.models import Role

logger = logging.getLogger(__name__)

# Setting → key of the provider's discovery document that supplies it when the setting is not given.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_ENDPOINT": "end_session_endpoint",
}
DISCOVERY_TTL = 3600.0
_discovery: dict[str, tuple[float, dict[str, Any]]] = {}
_discovery_lock = threading.Lock()


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be fetched or read."""


def oidc_enabled() -> bool:
    return bool(getattr(settings, "OIDC_RP_CLIENT_ID", ""))


def discovery_document(url: str) -> dict[str, Any]:
    """The provider's configuration at `url`, fetched at most once an hour per process."""
    with _discovery_lock:
        cached = _discovery.get(url)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL:
            return cached[1]
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"cannot read the OIDC discovery document at {url}: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the OIDC discovery document at {url} is not a JSON object")
    with _discovery_lock:
        _discovery[url] = (time.monotonic(), document)
    return document


def oidc_setting(name: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting; an endpoint not set explicitly comes from the discovery document.

    Replaces the library's `get_settings`, so its views and backend see discovered endpoints too.
    """
    value = getattr(settings, name, None)
    if value is None and name in DISCOVERED and settings.OIDC_OP_DISCOVERY_URL:
        value = discovery_document(settings.OIDC_OP_DISCOVERY_URL).get(DISCOVERED[name])
    if value is None:
        if default:
            return default[0]
        raise ProviderUnavailable(f"{name} is neither set nor advertised by the provider")
    return value


def parse_group_roles(text: str) -> dict[str, list[tuple[str, int]]]:
    """Parse `OIDC_GROUP_ROLES` ("group=project-slug:role,…") into {group: [(slug, role), …]}.

    The group name is everything before the last "=", so IdP group paths such as "/org/ml=a" still work.
    """
    mapping: dict[str, list[tuple[str, int]]] = {}
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        group, sep, target = item.rpartition("=")
        slug, colon, role_name = target.partition(":")
        if not sep or not group.strip() or not colon or not slug.strip():
            raise ValueError(f"{item!r} is not group=project-slug:role")
        try:
            role = Role.from_name(role_name.strip())
        except KeyError:
            choices = ", ".join(r.slug for r in Role)
            raise ValueError(f"{item!r}: unknown role {role_name.strip()!r} (one of {choices})") from None
        mapping.setdefault(group.strip(), []).append((slug.strip(), int(role)))
    return mapping


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """Signs users in from the provider's claims: the username from `OIDC_USERNAME_CLAIM` (the matching key),
    email and names kept up to date, SSO memberships following `OIDC_GROUPS_CLAIM`.

    Nothing is read at construction: Django builds a backend on every request of a signed-in user (to load the
    user), which must not need the provider; endpoints are resolved on use.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.UserModel = get_user_model()

    get_settings = staticmethod(oidc_setting)
    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_JWKS_ENDPOINT", None))
    OIDC_RP_CLIENT_ID = property(lambda self: settings.OIDC_RP_CLIENT_ID)
    OIDC_RP_CLIENT_SECRET = property(lambda self: settings.OIDC_RP_CLIENT_SECRET)
    OIDC_RP_SIGN_ALGO = property(lambda self: settings.OIDC_RP_SIGN_ALGO)
    OIDC_RP_IDP_SIGN_KEY = property(lambda self: getattr(settings, "OIDC_RP_IDP_SIGN_KEY", None))

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if not oidc_enabled():
            return None
        return super().authenticate(request, **kwargs)

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        # Some providers put groups in the ID token only: the verified ID token's claims, then userinfo's.
        self.claims = {**payload, **super().get_userinfo(access_token, id_token, payload)}
        return self.claims

    def username_of(self, claims: dict[str, Any]) -> str:
        return str(claims.get(settings.OIDC_USERNAME_CLAIM) or "").strip()[:150]

    def describe_user_by_claims(self, claims: dict[str, Any]) -> str:
        return f"username {self.username_of(claims)!r}"

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(self.username_of(claims))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        # The username claim, not the email: an IdP may let people set unverified emails.
        return self.UserModel.objects.filter(username=self.username_of(claims))

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        user = super().get_or_create_user(access_token, id_token, payload)
        if user is not None and user.is_active and settings.OIDC_GROUP_ROLES:
            groups = _as_list(self.claims.get(settings.OIDC_GROUPS_CLAIM))
            granted = sync_sso_memberships(user, groups, parse_group_roles(settings.OIDC_GROUP_ROLES))
            logger.info("SSO login of %s: groups %s grant %s", user, groups, granted)
        return user

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = self.UserModel(username=self.username_of(claims))
        user.set_unusable_password()  # signs in through the provider only
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        email = str(claims.get("email") or "").strip()
        taken = email and self.UserModel.objects.filter(email__iexact=email).exclude(pk=user.pk).exists()
        if taken:  # emails are unique: keep the old one rather than refuse the login
            logger.warning("SSO user %s claims email %s, which another user has; not updated", user, email)
        fields = {
            "email": user.email if taken else email or user.email,
            "first_name": str(claims.get("given_name") or user.first_name)[:150],
            "last_name": str(claims.get("family_name") or user.last_name)[:150],
        }
        changed = [name for name, value in fields.items() if getattr(user, name) != value]
        for name in changed:
            setattr(user, name, fields[name])
        if user.pk is None:
            user.save()
        elif changed:
            user.save(update_fields=changed)
        return user


def _sso_failed(request: HttpRequest, message: str) -> HttpResponse:
    messages.error(request, message)
    return HttpResponseRedirect(resolve_url(settings.LOGIN_URL))


class OIDCAuthenticateView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's authorization endpoint (state, nonce and PKCE kept in the session)."""

    def __init__(self, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)  # endpoints are resolved in get()

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable:
            logger.exception("cannot start an SSO login")
            return _sso_failed(request, _("The identity provider cannot be reached; try again later."))
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class OIDCCallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back. A state not issued to this session is refused (400, SuspiciousOperation);
    so is an ID token whose nonce is not the one sent; a declined or failed login returns to the login page."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        return _sso_failed(self.request, _("Single sign-on failed; you are not signed in."))


def provider_logout_url(request: HttpRequest) -> str:
    """Where logging out sends the browser: the provider's end-session endpoint when the user signed in
    through it and the provider advertises one (`OIDC_OP_LOGOUT_URL_METHOD`), else the local page."""
    local = resolve_url(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    if not (oidc_enabled() and id_token):
        return local
    try:
        endpoint = oidc_setting("OIDC_OP_LOGOUT_ENDPOINT", "")
    except ProviderUnavailable:
        logger.warning("cannot end the IdP session: discovery failed", exc_info=True)
        return local
    if not endpoint:
        return local
    params = {"id_token_hint": id_token, "post_logout_redirect_uri": request.build_absolute_uri(local)}
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


class LoginView(auth_views.LoginView):
    """The login page: "Sign in with <provider>" when SSO is on, the password form unless
    `PORTAL_PASSWORD_LOGIN` is off (then a password POST is refused with 403)."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.PORTAL_PASSWORD_LOGIN:
            raise PermissionDenied(_("Password login is disabled; sign in with single sign-on."))
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        sso_url = ""
        if oidc_enabled():
            next_url = context.get(self.redirect_field_name) or ""
            sso_url = reverse("accounts:oidc-authenticate") + (f"?{urlencode({'next': next_url})}" if next_url else "")
        context.update(
            password_login=settings.PORTAL_PASSWORD_LOGIN, sso_url=sso_url, sso_name=settings.OIDC_PROVIDER_NAME
        )
        return context


class LogoutView(auth_views.LogoutView):
    """Logs out here, then at the provider too when the session came from SSO and the provider can."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        provider_url = provider_logout_url(request)  # before logout() clears the session holding the ID token
        response = super().post(request, *args, **kwargs)
        if provider_url != resolve_url(settings.LOGOUT_REDIRECT_URL):
            return HttpResponseRedirect(provider_url)
        return response


@checks.register(checks.Tags.security)
def check_oidc_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Half-configured single sign-on fails at start-up, not at the first login."""
    errors: list[checks.CheckMessage] = []
    explicit = [name for name in DISCOVERED if getattr(settings, name, None)]
    if not oidc_enabled():
        if settings.OIDC_RP_CLIENT_SECRET or settings.OIDC_OP_DISCOVERY_URL or explicit:
            errors.append(
                checks.Error(
                    "OIDC settings are set but OIDC_RP_CLIENT_ID is not: SSO is off.",
                    hint="Set OIDC_RP_CLIENT_ID, or unset the other OIDC_* variables.",
                    id="portal.E020",
                )
            )
        if not settings.PORTAL_PASSWORD_LOGIN:
            errors.append(
                checks.Error(
                    "PORTAL_PASSWORD_LOGIN is off and SSO is not configured: nobody can sign in.",
                    hint="Configure OIDC_* or PORTAL_PASSWORD_LOGIN=true.",
                    id="portal.E023",
                )
            )
        return errors
    if not settings.OIDC_RP_CLIENT_SECRET:
        errors.append(checks.Error("OIDC_RP_CLIENT_ID is set but OIDC_RP_CLIENT_SECRET is not.", id="portal.E020"))
    if not settings.OIDC_OP_DISCOVERY_URL:
        needed = ["OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT"]
        if settings.OIDC_RP_SIGN_ALGO.startswith(("RS", "ES")) and not getattr(settings, "OIDC_RP_IDP_SIGN_KEY", None):
            needed.append("OIDC_OP_JWKS_ENDPOINT")
        missing = [name for name in needed if name not in explicit]
        if missing:
            errors.append(
                checks.Error(
                    f"SSO needs OIDC_OP_DISCOVERY_URL or these endpoints: {', '.join(missing)}.", id="portal.E021"
                )
            )
    try:
        parse_group_roles(settings.OIDC_GROUP_ROLES)
    except ValueError as exc:
        errors.append(checks.Error(f"OIDC_GROUP_ROLES: {exc}.", hint="group=project-slug:role,…", id="portal.E022"))
    return errors
