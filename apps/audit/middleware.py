"""`AuditMiddleware`: opens the change collector for each request and writes one entry if it mutated.

Recorded: a request with an unsafe method (POST, PUT, PATCH, DELETE) that succeeded (2xx/3xx), except the few
that read (MLflow's search endpoints), that are telemetry (MLflow's metric, param and tag logging: counted, not
recorded one by one) or act only through an event (login forms answer 200 with errors); and any request in which
someone logged in or out (the OIDC callback is a GET). Nothing for 4xx/5xx.

Sync middleware: under ASGI Django runs the whole sync chain and the view in one `sync_to_async` thread, so the
collector set here is the one the signal receivers see (apps/audit/capture.py explains the shared object).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from apps.audit import capture, services

logger = logging.getLogger(__name__)

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# MLflow reads that travel as POST: the searches and get-latest-versions.
MLFLOW_READS = re.compile(r"(^|/)(search|get[-\w]*)/?$")
# MLflow logging is telemetry, not a change to audit: a training loop logs a metric per step (one entry each made
# the log mostly metric points), and what it logged is in the run itself. Its volume is counted in aggregate
# (`portal_tracking_logged_total` on /metrics). Creating, updating and deleting runs, experiments, logged models
# and everything in the registry stay audited, and so do artifact uploads (they can replace a registered model's
# files).
MLFLOW_TELEMETRY = re.compile(
    r"^(runs/(log-metric|log-parameter|log-batch|set-tag|delete-tag|log-inputs|log-model|outputs)"
    r"|logged-models/[^/]+/(params|tags)(/[^/]+)?)/?$"
)
# Routes whose success is only known from their event: recorded when someone logged in or out, never otherwise.
EVENT_ROUTES = frozenset({"accounts:login", "accounts:logout", "admin:login", "admin:logout"})
# Routes that change no data (a language cookie).
READ_ROUTES = frozenset({"set_language"})
# Relayed to another server: a JupyterLab autosave or kernel message is the notebook's business, not a change to
# the portal's data (one entry per save would drown the log). Starting and stopping a notebook are recorded.
PROXIED_ROUTES = frozenset({"notebook-proxy"})


def is_mutating(request: HttpRequest) -> bool:
    if request.method not in UNSAFE_METHODS:
        return False
    match = getattr(request, "resolver_match", None)
    if match is None:
        return True
    if match.view_name in EVENT_ROUTES or match.view_name in READ_ROUTES or match.view_name in PROXIED_ROUTES:
        return False
    if match.url_name == "mlflow":
        endpoint = match.kwargs.get("endpoint", "")
        return not (MLFLOW_READS.search(endpoint) or MLFLOW_TELEMETRY.match(endpoint))
    return True


class AuditMiddleware:
    """Place after AuthenticationMiddleware: the entry's actor is the request's user once the view ran."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        collector = capture.Collector()
        reset = capture.current.set(collector)
        try:
            response = self.get_response(request)
        finally:
            capture.current.reset(reset)
        if response.status_code < 400 and (collector.event is not None or is_mutating(request)):
            try:
                services.record_request(request, response, collector)
            except Exception:  # the action itself succeeded and committed; say loudly that its record did not
                logger.exception("audit: could not record %s %s", request.method, request.path)
        return response
