"""Plumbing of the MLflow REST API: authentication, request parsing, routing, and MLflow-shaped errors.

Plain Django views (no DRF): the official client sends many small requests, and every millisecond shows.
Authentication: `Authorization: Bearer <portal token>` (MLFLOW_TRACKING_TOKEN), Basic auth with a token as
the password (MLFLOW_TRACKING_USERNAME/PASSWORD), or the browser session (CSRF-checked for writes).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.translation import gettext as _
from rest_framework.exceptions import AuthenticationFailed

from apps.accounts.authentication import raw_token_from_header
from apps.models.access import TOKEN_CALLERS, Caller
from apps.models.errors import (
    BadEndpoint,
    Forbidden,
    InvalidParameter,
    RequestTooLarge,
    ResourceConflict,
    TemporarilyUnavailable,
    TrackingError,
    Unauthenticated,
)
from portal.lib import jsonsafe, untrusted
from portal.lib.bodylimit import BodyTooLarge, read_body
from portal.lib.dbtimeout import is_statement_timeout
from portal.lib.errors import Conflict

logger = logging.getLogger(__name__)

Handler = Callable[[Caller, dict, dict], Any]
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LIST_PARAMS = frozenset({"run_ids", "experiment_ids", "stages", "order_by"})
# Parameters that are strings in MLflow's protobuf messages: its server (protobuf's JSON parser) refuses a number or
# an object there, and so does this one, at the door, rather than as a 500 where a handler treats them as text.
TEXT_PARAMS = frozenset({"filter", "page_token", "view_type", "run_view_type"})


def error_response(error: TrackingError) -> HttpResponse:
    response = JsonResponse(error.as_dict(), status=error.status)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="mlflow"'
    return response


def json_response(payload: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(
        jsonsafe.dumps(payload, separators=(",", ":"), default=str),
        content_type="application/json",
        status=status,
    )


def caller_for(request: HttpRequest) -> Caller:
    """The authenticated caller, or Unauthenticated (401)."""
    header = request.headers.get("Authorization", "")
    project_header = request.headers.get("X-Portal-Project") or None
    if header:
        raw = _basic_password(header)
        if raw is None:
            try:
                raw = raw_token_from_header(header)
            except AuthenticationFailed:
                raw = None
        caller = TOKEN_CALLERS.caller(raw, project_header, settings.PORTAL_MLFLOW_AUTH_TTL) if raw else None
        if caller is None:
            raise Unauthenticated(_("Invalid, expired or revoked token."))
        return caller
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        if request.method not in SAFE_METHODS:
            reason = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})
            if reason is not None:
                raise Forbidden(_("CSRF check failed."))
        return Caller(user, None, project_header)
    raise Unauthenticated(_("Authentication required: send a portal token as 'Authorization: Bearer <token>'."))


def _basic_password(header: str) -> str | None:
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != "basic":
        return None
    try:
        _user, _sep, password = base64.b64decode(parts[1]).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return password or None


def unsafe_parameter(exc: untrusted.UnsafeInput) -> InvalidParameter:
    """MLflow's INVALID_PARAMETER_VALUE naming the parameter (and the place inside it) that holds bad input."""
    if not exc.path:
        return InvalidParameter(_("Malformed request: %(problem)s") % {"problem": exc.message})
    return InvalidParameter(
        _("Invalid value for parameter '%(name)s': %(problem)s") % {"name": exc.path, "problem": exc.message}
    )


def _checked(data: dict, walked: bool = False) -> dict:
    """`data` checked by `portal.lib.untrusted` (unless `untrusted.loads` already `walked` it), text parameters
    strings."""
    if not walked:
        try:
            untrusted.check(data)
        except untrusted.UnsafeInput as exc:
            raise unsafe_parameter(exc) from None
    for name in TEXT_PARAMS:
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidParameter(
                _("Invalid value %(value)s for parameter '%(name)s' supplied: it must be a string.")
                % {"value": jsonsafe.dumps(value)[:100], "name": name}
            )
    return data


def request_data(request: HttpRequest, max_bytes: int | None = None) -> dict:
    """Query string for GET (lists for repeated keys), the JSON body otherwise; checked by `portal.lib.untrusted`
    (no NUL, no lone surrogate, no nesting past its limit) whatever the endpoint."""
    if request.method in SAFE_METHODS:
        return _checked({k: (v if k in LIST_PARAMS else v[-1]) for k, v in request.GET.lists()})
    try:
        body = read_body(request)
    except BodyTooLarge as exc:
        raise RequestTooLarge(str(exc)) from None
    if max_bytes is not None and len(body) > max_bytes:
        raise InvalidParameter(
            f"Batched logging API requests must be at most {max_bytes} bytes, got a request of size {len(body)}."
        )
    if not body.strip():
        return _checked(dict(request.GET.items()))
    try:
        data = untrusted.loads(body)
    except untrusted.UnsafeInput as exc:
        raise unsafe_parameter(exc) from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidParameter(_("Malformed request: the body is not valid JSON.")) from None
    if not isinstance(data, dict):
        raise InvalidParameter(_("Malformed request: the body must be a JSON object."))
    return _checked(data, walked=True)


class Router:
    """(method, path regex) → handler(caller, data, path_kwargs) returning a JSON-able dict or a response."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern, Handler, int | None]] = []

    def route(self, method: str, path: str, *, max_bytes: int | None = None) -> Callable[[Handler], Handler]:
        pattern = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$")

        def register(handler: Handler) -> Handler:
            self.routes.append((method, pattern, handler, max_bytes))
            return handler

        return register

    def dispatch(self, request: HttpRequest, endpoint: str) -> HttpResponse:
        try:
            handler, kwargs, max_bytes = self._find(request.method or "GET", endpoint)
            caller = caller_for(request)
            data = request_data(request, max_bytes)
            result = handler(caller, data, kwargs)
        except TrackingError as error:
            return error_response(error)
        except Conflict as conflict:  # a service's refusal (still in use), in MLflow's words
            return error_response(ResourceConflict(conflict.message))
        except OperationalError as error:
            if not is_statement_timeout(error):
                logger.exception("MLflow API %s %s failed", request.method, endpoint)
                return error_response(TrackingError(_("Internal error.")))
            seconds = settings.PORTAL_REQUEST_STATEMENT_TIMEOUT
            message = _("The database took longer than %(seconds)s s for this request; narrow it down.")
            return error_response(TemporarilyUnavailable(message % {"seconds": seconds}))
        except Exception:  # a bug, never bad input: say so in MLflow's words
            logger.exception("MLflow API %s %s failed", request.method, endpoint)
            return error_response(TrackingError(_("Internal error.")))
        if isinstance(result, HttpResponse):
            return result
        return json_response(result if result is not None else {})

    def _find(self, method: str, endpoint: str) -> tuple[Handler, dict, int | None]:
        path = endpoint.rstrip("/")
        allowed = False
        for route_method, pattern, handler, max_bytes in self.routes:
            match = pattern.match(path)
            if match:
                if route_method == method or (method == "HEAD" and route_method == "GET"):
                    return handler, match.groupdict(), max_bytes
                allowed = True
        if allowed:
            raise BadEndpoint(f"Method {method} is not allowed on /{path}.")
        raise BadEndpoint(f"No API endpoint /{path}.")
