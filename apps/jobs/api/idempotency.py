"""The `Idempotency-Key` request header on the endpoints that start runs (draft-ietf-httpapi-idempotency-key-header):
the first request answers 201 with the new run, a retry with the same key 200 with the same run (and
`Idempotent-Replayed: true`), the key sent with a different request 422."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.jobs import services
from apps.jobs.api.serializers import PipelineRunSerializer

HEADER = "Idempotency-Key"
KEY = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII: a UUID, a ULID, a client's own scheme

PARAMETER = OpenApiParameter(
    HEADER,
    str,
    location=OpenApiParameter.HEADER,
    required=False,
    description="A key of the client's choosing (a UUID): a retry with the same key returns the run the first "
    "request started (200) instead of starting another; the same key with a different request is a 422.",
)


class KeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def request_key(request: Request, action: str, target: int) -> services.RequestKey | None:
    """The request's key with the digest of what it asks (`action` on `target` with its body), or None."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not KEY.fullmatch(raw):
        raise ValidationError({HEADER: [_("Give 1 to 255 visible ASCII characters, such as a UUID.")]})
    body: Any = request.data
    payload = json.dumps({"action": action, "target": target, "body": body}, sort_keys=True, default=str)
    return services.RequestKey(raw, hashlib.sha256(payload.encode()).hexdigest())


def start_response(request: Request, action: str, target: int, start) -> Response:
    """Start a run with `start()` once per key: 201 and the run, or 200 and the run a previous request started."""
    key = request_key(request, action, target)
    try:
        run, created = services.start_once(request.user, key, start)
    except services.KeyReused:
        raise KeyReused(_("This Idempotency-Key was already used for a different request.")) from None
    response = Response(PipelineRunSerializer(run).data, status=status.HTTP_201_CREATED if created else 200)
    if not created:
        response["Idempotent-Replayed"] = "true"
    return response
