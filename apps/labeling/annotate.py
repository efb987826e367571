"""Annotating through the portal: the portal is the only door to Label Studio.

Portal members never get a Label Studio account. The annotate page (Label Studio's own front end, vendored) asks
the portal for the next task and sends each submit, update and skip back to the portal; the portal checks the
member's role (editor or more), writes the annotation to Label Studio with its service token and records which
portal user made it (`Annotation`: Label Studio's `completed_by` is the service account). Why this design rather
than one Label Studio organization per project or an SSO plugin: docs/labeling.md.

Errors: `ValidationError` keyed by field (the API answers 400), `LabelStudioUnavailable` (503) before anything
is written in the portal.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.labeling import media, server, tasks
from apps.labeling.client import LabelStudio, LabelStudioError
from apps.labeling.models import Annotation, LabelingProject, LabelingTask
from apps.outbox.services import enqueue

MAX_RESULTS = 1000  # regions of one annotation
CONTROL_NAME = re.compile(r"<\s*[A-Za-z]+\b[^>]*\bname\s*=\s*[\"']([^\"']+)[\"']")


def queue(labeling: LabelingProject) -> Any:
    """The tasks still to do, in "uncertain first" order (lowest prediction score first, unpredicted last)."""
    return labeling.tasks.filter(state=LabelingTask.State.TODO, ls_task_id__isnull=False).order_by(
        F("score").asc(nulls_last=True), "pk"
    )


def next_task(labeling: LabelingProject, user: Any, task_id: int | None = None) -> LabelingTask | None:
    """The task to show: the one asked for (a task of this labeling project, any state: to review or change one's
    own annotation), else the first still to do. None when every task is done."""
    if task_id is not None:
        task = labeling.tasks.filter(pk=task_id, ls_task_id__isnull=False).first()
        if task is None:
            raise ValidationError({"task": [_("No such task in this labeling project.")]})
        return task
    return queue(labeling).first()


def browser_data(task: LabelingTask, data: dict[str, Any]) -> dict[str, Any]:
    """The task's data as the browser loads it: media links on the portal's own origin, signed afresh (those in
    Label Studio carry LABELING_PORTAL_URL and may be older than their TTL)."""
    prefix = settings.LABELING_PORTAL_URL + "/labeling/media/"
    fresh = reverse("labeling-media", args=[media.sign(task.pk)])
    return {k: fresh if isinstance(v, str) and v.startswith(prefix) else v for k, v in data.items()}


def task_payload(client: LabelStudio, labeling: LabelingProject, task: LabelingTask, user: Any) -> dict[str, Any]:
    """What Label Studio's front end needs to show a task: its data, the model's predictions, and the user's own
    annotation when they made one (so that they update it rather than add a second)."""
    answer = client.request("GET", f"/api/tasks/{task.ls_task_id}/")
    own = Annotation.objects.filter(task=task, user=user).first()
    annotations = []
    if own is not None:
        for item in answer.get("annotations") or []:
            if item.get("id") == own.ls_annotation_id:
                annotations.append({"id": item["id"], "result": item.get("result") or [],
                                    "was_cancelled": bool(item.get("was_cancelled"))})  # fmt: skip
    predictions = [
        {"id": p.get("id"), "result": p.get("result") or [], "score": p.get("score"),
         "model_version": p.get("model_version") or ""}
        for p in answer.get("predictions") or []
    ]  # fmt: skip
    return {
        "id": task.pk,
        "ls_task_id": task.ls_task_id,
        "path": str(task),
        "state": task.state,
        "score": task.score,
        "data": browser_data(task, answer.get("data") or {}),
        "predictions": predictions,
        "annotations": annotations,
    }


def control_names(label_config: str) -> set[str]:
    return set(CONTROL_NAME.findall(label_config))


def clean_result(labeling: LabelingProject, result: Any) -> list[dict[str, Any]]:
    """A list of regions, each naming a control tag of this project's configuration (`from_name`)."""
    if not isinstance(result, list):
        raise ValidationError({"result": [_("Send the annotation's result as a list of regions.")]})
    if len(result) > MAX_RESULTS:
        raise ValidationError({"result": [_("At most %(n)d regions per annotation.") % {"n": MAX_RESULTS}]})
    names = control_names(labeling.label_config)
    for index, item in enumerate(result):
        if not isinstance(item, dict) or not isinstance(item.get("value"), dict):
            raise ValidationError({"result": [_("Region %(i)d is not an object with a value.") % {"i": index}]})
        for key in ("from_name", "to_name", "type"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise ValidationError({"result": [_("Region %(i)d has no %(key)s.") % {"i": index, "key": key}]})
        if item["from_name"] not in names or item["to_name"] not in names:
            raise ValidationError(
                {"result": [_("Region %(i)d names a tag that is not in the label configuration.") % {"i": index}]}
            )
    return result


def save_annotation(
    labeling: LabelingProject,
    user: Any,
    task_id: int,
    result: Any,
    *,
    was_cancelled: bool = False,
    lead_time: float | None = None,
) -> Annotation:
    """Submit, update or skip: the user's annotation of one task written to Label Studio (created the first time,
    changed after that), recorded as theirs in the portal, and the project's progress re-read in the background
    (its page updates live)."""
    task = labeling.tasks.filter(pk=task_id, ls_task_id__isnull=False).first()
    if task is None:
        raise ValidationError({"task": [_("No such task in this labeling project.")]})
    cleaned = [] if was_cancelled else clean_result(labeling, result)
    if not was_cancelled and not cleaned:
        raise ValidationError({"result": [_("Label the task before submitting it, or skip it.")]})
    body: dict[str, Any] = {"result": cleaned, "was_cancelled": was_cancelled}
    if lead_time is not None:
        body["lead_time"] = lead_time
    own = Annotation.objects.filter(task=task, user=user).first()
    with server.connect() as client:
        if own is not None:
            try:
                client.request("PATCH", f"/api/annotations/{own.ls_annotation_id}/", json=body)
            except LabelStudioError as exc:
                if exc.status != 404:
                    raise
                own.delete()  # deleted in Label Studio meanwhile: made again below
                own = None
        if own is None:
            made = client.request("POST", f"/api/tasks/{task.ls_task_id}/annotations/", json=body)
    with transaction.atomic():
        if own is None:
            own = Annotation.objects.create(
                task=task, user=user, username=user.get_username(), ls_annotation_id=made["id"],
                was_cancelled=was_cancelled,
            )  # fmt: skip
        else:
            own.was_cancelled, own.updated_at = was_cancelled, timezone.now()
            own.save(update_fields=["was_cancelled", "updated_at"])
        state = LabelingTask.State.SKIPPED if was_cancelled else LabelingTask.State.LABELED
        if task.state != LabelingTask.State.LABELED or state == LabelingTask.State.LABELED:
            LabelingTask.objects.filter(pk=task.pk).update(state=state)
        enqueue(tasks.sync_project, labeling.pk)
    return own
