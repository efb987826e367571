"""The test IdP's directory: the claims it releases (standard ones and `groups`) and an admin endpoint through
which a test creates users, changes their groups and registers the portal's redirect URIs, as an IdP
administrator would."""

from __future__ import annotations

import json
import os
from typing import Any

from django.contrib.auth.models import Group, User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oidc_provider.lib.claims import ScopeClaims
from oidc_provider.models import Client, ResponseType


def userinfo(claims: dict[str, Any], user: User) -> dict[str, Any]:
    """django-oidc-provider's OIDC_USERINFO: the standard claims of `user`."""
    claims.update(
        name=user.get_full_name(),
        given_name=user.first_name,
        family_name=user.last_name,
        preferred_username=user.username,
        email=user.email,
        email_verified=True,
    )
    return claims


class GroupsScopeClaims(ScopeClaims):
    """The `groups` scope releases the user's group names as the `groups` claim."""

    info_groups = (_("Groups"), _("The groups you belong to."))

    def scope_groups(self) -> dict[str, list[str]]:
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}


@csrf_exempt
@require_POST
def directory(request: HttpRequest) -> HttpResponse:
    """Apply {"client": {...}, "users": [{username, password, email, groups, …}]} (bearer IDP_ADMIN_TOKEN)."""
    expected = f"Bearer {os.environ['IDP_ADMIN_TOKEN']}"
    if not constant_time_compare(request.headers.get("Authorization", ""), expected):
        return JsonResponse({"error": "forbidden"}, status=403)
    body = json.loads(request.body)
    if "client" in body:
        spec = body["client"]
        client, _created = Client.objects.update_or_create(
            client_id=spec["client_id"],
            defaults={
                "name": spec.get("name", "portal"),
                "client_type": "confidential",
                "client_secret": spec["client_secret"],
                "jwt_alg": "RS256",
                "require_consent": True,
                "reuse_consent": False,
            },
        )
        client.redirect_uris = spec["redirect_uris"]
        client.post_logout_redirect_uris = spec.get("post_logout_redirect_uris", [])
        client.scope = spec.get("scope", [])
        client.save()
        client.response_types.set(ResponseType.objects.filter(value="code"))
    for spec in body.get("users", []):
        user, _created = User.objects.get_or_create(username=spec["username"])
        user.email = spec.get("email", "")
        user.first_name = spec.get("first_name", "")
        user.last_name = spec.get("last_name", "")
        user.set_password(spec["password"])
        user.save()
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in spec.get("groups", [])])
    return JsonResponse({"ok": True})
