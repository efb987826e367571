"""/metrics (Prometheus text, django_prometheus): it names projects and services, so it is not public.

Read by Prometheus with the scrape token (`Authorization: Bearer <PORTAL_METRICS_TOKEN>`; Prometheus's
`authorization.credentials_file`), or in a browser by a platform admin (active staff) signed in. Anyone else gets
401 (with a Bearer challenge) or, signed in, 403; never a line of the metrics (docs/security.md).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_prometheus.exports import ExportToDjangoView


def scrape_token_given(request: HttpRequest) -> bool:
    expected = settings.PORTAL_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if not expected or scheme.lower() != "bearer" or not given.strip():
        return False
    return hmac.compare_digest(given.strip().encode(), expected.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    user = request.user
    if scrape_token_given(request) or (user.is_authenticated and user.is_active and user.is_staff):
        return ExportToDjangoView(request)
    if user.is_authenticated:
        return HttpResponse("Only platform admins may read the metrics.\n", status=403, content_type="text/plain")
    response = HttpResponse(
        "Authentication required: the metrics scrape token.\n", status=401, content_type="text/plain"
    )
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
