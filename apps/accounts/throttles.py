"""Rate limits on password logins (per client IP) and token creation (per user), for pages and API alike.

DRF's throttles count in the default cache (Redis when REDIS_URL is set, so every web process shares the
counts). The API answers an exceeded limit with DRF's 429 and `Retry-After`; pages call `too_many_requests`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from math import ceil
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _
from rest_framework.throttling import SimpleRateThrottle


class _SettingRateThrottle(SimpleRateThrottle):
    """A throttle whose rate is read from a portal setting at each request (so tests can override it)."""

    setting: str = ""

    def get_rate(self) -> str:
        return getattr(settings, self.setting)

    def get_ident(self, request: Any) -> str:
        # REMOTE_ADDR only: X-Forwarded-For is the client's to forge. Behind a proxy, uvicorn's --proxy-headers
        # (with --forwarded-allow-ips) already puts the real client address in REMOTE_ADDR.
        return request.META.get("REMOTE_ADDR", "")


class LoginRateThrottle(_SettingRateThrottle):
    """Password login attempts (POSTs to the login page) per client IP: PORTAL_LOGIN_RATE."""

    scope = "login"
    setting = "PORTAL_LOGIN_RATE"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        if request.method != "POST":
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class TokenCreateRateThrottle(_SettingRateThrottle):
    """Token creations per user, from the tokens page or `POST /api/v1/tokens/`: PORTAL_TOKEN_CREATE_RATE."""

    scope = "token-create"
    setting = "PORTAL_TOKEN_CREATE_RATE"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        if request.method != "POST" or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


def retry_after(throttle: SimpleRateThrottle) -> int:
    """Whole seconds until `throttle` lets the next request through (at least 1)."""
    return max(1, ceil(throttle.wait() or 1))


def too_many_requests(seconds: int, message: str | None = None) -> HttpResponse:
    """The page answer to an exceeded limit: 429, `Retry-After`, and a sentence saying when to retry."""
    text = message or _("Too many requests. Try again in %(seconds)d seconds.") % {"seconds": seconds}
    response = HttpResponse(text, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(seconds)
    return response


def throttled(throttle_class: type[SimpleRateThrottle]) -> Callable[[Callable[..., HttpResponse]], Callable]:
    """Decorate a page view: requests over `throttle_class`'s limit get `too_many_requests` instead."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            throttle = throttle_class()
            if not throttle.allow_request(request, None):
                return too_many_requests(retry_after(throttle))
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def login_rate_limited(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The login page with PORTAL_LOGIN_RATE applied to its POSTs (wraps the `as_view()` of the login view)."""
    return throttled(LoginRateThrottle)(view)
