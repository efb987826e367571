"""The Label Studio ML-backend protocol, answered by the portal in front of an attached inference service.

Label Studio calls `<LABELING_PORTAL_URL>/labeling/ml/<labeling project id>/<endpoint>` with HTTP basic auth (the
credentials `autolabel.attach` gave it; wrong or missing → 401, no detail of what exists):

- `GET /health` → `{"status": "UP"}`;
- `POST /setup` → `{"model_version": "<service>@r<revision>"}`;
- `POST /predict` `{tasks: [...]}` → `{"results": [one prediction per task]}` (`autolabel.predict`);
- `POST /webhook` → project events (annotations, START_TRAINING): acknowledged at once, annotation events queue
  the same sync as the portal's own webhook.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apps.labeling import autolabel, tasks
from apps.labeling.models import MLBackend
from apps.outbox.services import enqueue

logger = logging.getLogger(__name__)


def _unauthorized() -> JsonResponse:
    response = JsonResponse({"detail": "authentication required"}, status=401)
    response["WWW-Authenticate"] = 'Basic realm="portal-ml-backend"'
    return response


def _credentials(request: HttpRequest) -> tuple[str, str] | None:
    kind, _sep, value = request.headers.get("Authorization", "").partition(" ")
    if kind.lower() != "basic" or not value:
        return None
    try:
        username, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (username, password) if sep else None


def backend_view(methods: tuple[str, ...]) -> Callable:
    def decorate(view: Callable) -> Callable:
        @csrf_exempt  # Label Studio is no browser: basic auth is the credential
        @wraps(view)
        def wrapper(request: HttpRequest, pk: int) -> JsonResponse:
            row = (
                MLBackend.objects.select_related("labeling_project", "service__current_revision")
                .filter(labeling_project_id=pk)
                .first()
            )
            given = _credentials(request)
            if row is None or given is None or not autolabel.credentials_match(row, *given):
                return _unauthorized()
            if request.method not in methods:
                return JsonResponse({"detail": "method not allowed"}, status=405)
            body: Any = {}
            if request.method == "POST" and request.body:
                try:
                    body = json.loads(request.body)
                except ValueError:
                    return JsonResponse({"detail": "the body is not JSON"}, status=400)
                if not isinstance(body, dict):
                    return JsonResponse({"detail": "the body must be a JSON object"}, status=400)
            return view(request, row, body)

        return wrapper

    return decorate


@backend_view(("GET",))
def health(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    return JsonResponse({"status": "UP", "model_class": row.service.name})


@backend_view(("POST",))
def setup(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    return JsonResponse({"model_version": autolabel.model_version(row.service)})


@backend_view(("GET",))
def versions(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    return JsonResponse({"versions": [autolabel.model_version(row.service)]})


@backend_view(("POST",))
def predict(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    given = body.get("tasks")
    if not isinstance(given, list) or not all(isinstance(t, dict) for t in given):
        return JsonResponse({"detail": "tasks must be a list of task objects"}, status=400)
    labeling = row.labeling_project
    ids = [t.get("id") for t in given]
    known = {t.ls_task_id: t for t in labeling.tasks.filter(ls_task_id__in=[i for i in ids if isinstance(i, int)])}
    ours = [known[i] for i in ids if i in known]
    try:
        predicted = dict(zip([t.ls_task_id for t in ours], autolabel.predict(labeling, row.service, ours), strict=True))
    except autolabel.NotServing as exc:
        return JsonResponse({"detail": str(exc)}, status=503)
    version = autolabel.model_version(row.service)
    empty = {"result": [], "score": 0.0, "model_version": version}
    return JsonResponse({"results": [predicted.get(i, empty) for i in ids], "model_version": version})


@backend_view(("POST",))
def webhook(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    action = str(body.get("action", ""))
    if action.startswith("ANNOTATION") or action.startswith("TASKS"):
        enqueue(tasks.sync_project, row.labeling_project_id)
        return JsonResponse({"status": "queued"})
    if action == "START_TRAINING":
        return start_training(row)
    return JsonResponse({"status": "ignored", "action": action})


def start_training(row: MLBackend) -> JsonResponse:
    """START_TRAINING: the labeling project's training pipeline on a fresh export, queued (Label Studio waits
    for nothing long). Without a chosen pipeline, said so."""
    labeling = row.labeling_project
    if labeling.training_pipeline_id is None:
        return JsonResponse({"status": "ignored", "detail": "no training pipeline chosen in the portal"})
    enqueue(tasks.train, labeling.pk)
    return JsonResponse({"status": "queued", "job_id": f"labeling-{labeling.pk}-train"})


@backend_view(("POST",))
def train(request: HttpRequest, row: MLBackend, body: dict) -> JsonResponse:
    """The older protocol's `/train` (Label Studio without its START_TRAINING webhook flag): the same."""
    return start_training(row)
