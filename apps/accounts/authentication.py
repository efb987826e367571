"""DRF authentication by API token: `Authorization: Bearer <t>` or `Authorization: Token <t>`."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.accounts.middleware import apply_user_language
from apps.accounts.models import ApiToken
from apps.accounts.services import authenticate_token

KEYWORDS = ("bearer", "token")


def raw_token_from_header(header: str) -> str | None:
    parts = header.split()
    if not parts or parts[0].lower() not in KEYWORDS:
        return None
    if len(parts) != 2:
        raise exceptions.AuthenticationFailed(_("Invalid Authorization header: expected “Bearer <token>”."))
    return parts[1]


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Sets `request.auth` to the ApiToken, whose project and scope then narrow what the user can do."""

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        raw = raw_token_from_header(header)
        if raw is None:
            return None
        token = authenticate_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked token."))
        # The session middleware saw no user for a token request: the token's user's language applies from here.
        apply_user_language(getattr(request, "_request", request), token.user)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
