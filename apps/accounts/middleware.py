"""A signed-in user's saved interface language, applied to every request (pages, htmx fragments and the API).

Django's LocaleMiddleware picks the language from the cookie or Accept-Language before the user is known; this
middleware runs after AuthenticationMiddleware and replaces that choice with the user's preference when one is
saved. DRF authenticates API tokens later, in the view, so ApiTokenAuthentication calls `apply_user_language`
too. Websocket messages carry data, not text: the browser renders them with the strings of the page (and of
/jsi18n/), which were already in the user's language.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation


def apply_user_language(request: HttpRequest, user: Any) -> None:
    """Activate `user`'s saved language for the rest of this request; nothing when none is saved."""
    code = getattr(user, "language", "") if user is not None and user.is_authenticated else ""
    if code and code in dict(settings.LANGUAGES):
        translation.activate(code)
        request.LANGUAGE_CODE = translation.get_language()


class UserLanguageMiddleware:
    """Place after AuthenticationMiddleware (and LocaleMiddleware, whose response half sets Content-Language)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        apply_user_language(request, getattr(request, "user", None))
        return self.get_response(request)
