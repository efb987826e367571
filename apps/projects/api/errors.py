"""One exception handler for the API: domain errors become 400 with field messages, conflicts 409, never 500."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError, RestrictedError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.lib.errors import Conflict


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail)
    if isinstance(exc, ProtectedError | RestrictedError):
        # The safety net: a delete service that did not name its blockers itself still answers 409 naming them
        # (Django's collector refuses before it deletes anything, so nothing is half deleted).
        exc = Conflict.from_protected(exc)
    if isinstance(exc, Conflict):
        return Response(exc.as_dict(), status=status.HTTP_409_CONFLICT)
    return drf_exception_handler(exc, context)
