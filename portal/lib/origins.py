"""Whether a request comes from the portal's own pages, for the endpoints that cannot rely on Django's
CsrfViewMiddleware: the notebook proxy (the CSRF token is not Jupyter's to carry) and the serving router (raw ASGI).

The rule is Django's: Origin, or without one Referer, must be the portal's own origin or one of
CSRF_TRUSTED_ORIGINS (where "https://*.example.com" matches subdomains). A request with neither is refused: every
browser sends Origin with a POST/PUT/PATCH/DELETE fetch.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.utils.http import is_same_domain


def trusted_origin(origin: str, own_origin: str) -> bool:
    """`origin` ("scheme://host[:port]") is the portal's own, or one of CSRF_TRUSTED_ORIGINS (wildcards allowed)."""
    if origin == own_origin or origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    return any(
        is_same_domain(parts.netloc, urlsplit(trusted).netloc.lstrip("*"))  # "*.example.com" as Django reads it
        for trusted in settings.CSRF_TRUSTED_ORIGINS
        if "*" in trusted and urlsplit(trusted).scheme == parts.scheme
    )


def from_portal(origin: str | None, referer: str | None, own_origin: str) -> bool:
    """The request's Origin (or, without one, its Referer) is trusted; "null" and neither header are not."""
    if origin is not None:
        return origin != "null" and trusted_origin(origin, own_origin)
    if not referer:
        return False
    parts = urlsplit(referer)
    return bool(parts.scheme and parts.netloc) and trusted_origin(f"{parts.scheme}://{parts.netloc}", own_origin)
