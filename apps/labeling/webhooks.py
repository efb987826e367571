"""The endpoint Label Studio's webhooks call: the secret header checked, the work queued, the answer at once."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.labeling import sync, tasks
from apps.labeling.models import LabelingProject
from apps.outbox.services import enqueue


@csrf_exempt  # Label Studio is no browser: the per-project secret header is the credential
@require_POST
def receive(request: HttpRequest, pk: int) -> JsonResponse:
    if not sync.secret_matches(pk, request.headers.get(sync.WEBHOOK_HEADER, "")):
        return JsonResponse({"detail": "wrong or missing webhook secret"}, status=403)
    if not LabelingProject.objects.filter(pk=pk).exists():
        return JsonResponse({"detail": "no such labeling project"}, status=404)
    enqueue(tasks.sync_project, pk)
    return JsonResponse({"queued": True})
