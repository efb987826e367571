"""One limit on request bodies read whole (JSON, forms): PORTAL_MAX_REQUEST_BODY (Django's
DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB by default), answered with 413 and a sentence that says it.

Django applies that limit only to `request.body` and `request.POST` with a Content-Length; DRF's parsers read the
stream themselves and ignored it (a 10 MB JSON body was stored). The parsers here hold every DRF body to it
(REST_FRAMEWORK's DEFAULT_PARSER_CLASSES), and the MLflow API reads its bodies through `read_body`. Bodies that
stream (dataset upload chunks, MLflow artifacts) are not read whole, and have their own limits (the storage quota).
"""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.utils.translation import gettext as _
from rest_framework import parsers, status
from rest_framework.exceptions import APIException


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(too_large_message(limit))
        self.limit = limit


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def too_large_message(limit: int) -> str:
    return _("The request body is larger than the limit of %(limit)s bytes.") % {"limit": f"{limit:,}"}


def declared_length(meta: dict[str, Any]) -> int:
    try:
        return max(int(meta.get("CONTENT_LENGTH") or 0), 0)
    except ValueError:
        return 0


def read_body(request: HttpRequest) -> bytes:
    """The whole body, or BodyTooLarge: at once when the declared length is over the limit, else once read (a
    chunked body has no declared length)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and declared_length(request.META) > limit:
        raise BodyTooLarge(limit)
    try:
        body = request.body
    except RequestDataTooBig:  # Django measures a streamed ASGI body itself
        raise BodyTooLarge(limit) from None
    if limit is not None and len(body) > limit:
        raise BodyTooLarge(limit)
    return body


class _Limited:
    """Reads at most the limit (and one byte more, to tell) before the parser sees the body."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and stream is not None:
            request = (parser_context or {}).get("request")
            meta = request.META if request is not None else {}
            if declared_length(meta) > limit:
                raise RequestTooLarge(too_large_message(limit))
            body = stream.read(limit + 1)
            if len(body) > limit:
                raise RequestTooLarge(too_large_message(limit))
            stream = io.BytesIO(body)
        return super().parse(stream, media_type, parser_context)  # type: ignore[misc]


class JSONParser(_Limited, parsers.JSONParser):
    pass


class FormParser(_Limited, parsers.FormParser):
    pass


class MultiPartParser(_Limited, parsers.MultiPartParser):
    """No API endpoint takes files: a multipart body is form fields, held to the same limit."""
