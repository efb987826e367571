"""Media for Label Studio: signed, expiring URLs to one task's file, answered by the portal from the blob store.

Nothing is copied into Label Studio and nothing is public: a URL names one LabelingTask and carries Django's
signature (SECRET_KEY, salted) with its time; it is refused once LABELING_MEDIA_URL_TTL has passed, when the
task is gone, or when the signature does not match. Why not Label Studio's local-files storage: docs/labeling.md.
"""

from __future__ import annotations

import mimetypes
import posixpath

from django.conf import settings
from django.core import signing
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from apps.datasets import blobs
from apps.datasets.models import VersionFile
from apps.labeling.models import LabelingTask

SALT = "labeling.media"


def sign(task_pk: int) -> str:
    return signing.dumps(task_pk, salt=SALT)


def media_url(task_pk: int) -> str:
    return settings.LABELING_PORTAL_URL + reverse("labeling-media", args=[sign(task_pk)])


def task_for(token: str) -> LabelingTask:
    try:
        pk = signing.loads(token, salt=SALT, max_age=settings.LABELING_MEDIA_URL_TTL)
    except signing.BadSignature as exc:  # SignatureExpired is a BadSignature
        raise Http404("invalid or expired media link") from exc
    task = LabelingTask.objects.select_related("labeling_project").filter(pk=pk).first()
    if task is None:
        raise Http404("no such task")
    return task


@require_GET
def serve(request: HttpRequest, token: str) -> StreamingHttpResponse:
    """The file of one task (no session needed: the signature is the permission)."""
    task = task_for(token)
    entry = (
        VersionFile.objects.select_related("blob")
        .filter(version_id=task.labeling_project.dataset_version_id, path=task.path)
        .first()
    )
    if entry is None:
        raise Http404("file not in the dataset version")
    content_type = mimetypes.guess_type(entry.path)[0] or "application/octet-stream"
    response = StreamingHttpResponse(blobs.open_chunks(entry.blob_id), content_type=content_type)
    response["Content-Length"] = str(entry.size)
    response["Content-Disposition"] = f'inline; filename="{posixpath.basename(entry.path)}"'
    response["Cache-Control"] = "private, max-age=3600"
    response["ETag"] = f'"{entry.blob_id}"'
    # Label Studio's front end (another origin) draws the image on a canvas.
    response["Access-Control-Allow-Origin"] = "*"
    response["X-Content-Type-Options"] = "nosniff"
    return response
