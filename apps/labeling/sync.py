"""Label Studio → portal: a labeling project's progress read back from its tasks, by webhook and by reconcile.

Webhooks carry no signature (Label Studio 1.23): each labeling project's webhook sends a secret header derived from
the portal's SECRET_KEY and the project's id (`webhook_secret`), compared in constant time. The view acknowledges
at once (Label Studio waits 1 s) and queues `tasks.sync_project`; the periodic `tasks.reconcile` syncs every
project, so an event lost while the portal or the worker was down is repaired.
"""

from __future__ import annotations

import hmac
import itertools
import json
from collections import Counter
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac

from apps.labeling.client import LabelStudio
from apps.labeling.models import Annotation, LabelingProject, LabelingTask
from apps.projects.events import publish_event

WEBHOOK_HEADER = "X-Portal-Labeling-Secret"
WEBHOOK_ACTIONS = [
    "ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED", "TASKS_CREATED",
    "TASKS_DELETED",
]  # fmt: skip


def webhook_secret(pk: int) -> str:
    return salted_hmac("labeling.webhook", str(pk)).hexdigest()


def secret_matches(pk: int, given: str) -> bool:
    return hmac.compare_digest(webhook_secret(pk), given or "")


def register_webhook(client: LabelStudio, row: LabelingProject, portal_url: str) -> dict[str, Any]:
    """SDK: webhooks.create(url, project, actions, send_payload=False, headers): ids in the payload are enough."""
    return client.request(
        "POST",
        "/api/webhooks/",
        json={
            "project": row.ls_project_id,
            "url": portal_url + reverse("labeling-webhook", args=[row.pk]),
            "send_payload": False,
            "send_for_all_actions": False,
            "actions": WEBHOOK_ACTIONS,
            "headers": {WEBHOOK_HEADER: webhook_secret(row.pk)},
            "is_active": True,
        },
    )


def progress(
    tasks: list[dict[str, Any]],
    users: dict[int, str],
    portal_names: dict[int, str] | None = None,
    total: int | None = None,
) -> dict[str, Any]:
    """labeled / skipped / total, annotations per annotator, and pairwise agreement where a task has several.
    `tasks` may be only those with annotations, `total` then counting them all.

    An annotation made through the portal's annotate page counts for the portal user who made it
    (`portal_names`: Label Studio annotation id → username); others for their Label Studio user's e-mail."""
    portal_names = portal_names or {}
    labeled = skipped = 0
    per_annotator: Counter[str] = Counter()
    pairs = agreeing = 0
    for task in tasks:
        annotations = task.get("annotations") or []
        done = [a for a in annotations if not a.get("was_cancelled")]
        if done:
            labeled += 1
        elif annotations:
            skipped += 1
        for annotation in done:
            who = annotation.get("completed_by")
            who = who.get("id") if isinstance(who, dict) else who
            name = portal_names.get(annotation.get("id")) or users.get(who, str(who))
            per_annotator[name] += 1
        results = [_canonical(a.get("result") or []) for a in done]
        for first, second in itertools.combinations(results, 2):
            pairs += 1
            agreeing += first == second
    return {
        "labeled": labeled,
        "skipped": skipped,
        "total": len(tasks) if total is None else total,
        "annotators": dict(sorted(per_annotator.items())),
        "agreement": round(agreeing / pairs, 4) if pairs else None,
        "compared_pairs": pairs,
    }


def _canonical(result: list[dict[str, Any]]) -> str:
    """What an annotation says, without ids and sizes: the (from_name, value) pairs, sorted."""
    items = sorted(json.dumps([r.get("from_name"), r.get("value")], sort_keys=True) for r in result)
    return "|".join(items)


def task_state(task: dict[str, Any]) -> str:
    annotations = task.get("annotations") or []
    if any(not a.get("was_cancelled") for a in annotations):
        return LabelingTask.State.LABELED
    return LabelingTask.State.SKIPPED if annotations else LabelingTask.State.TODO


# The Data Manager's filter for tasks with at least one annotation, submitted or skipped: the others are to do.
ANNOTATED = {
    "filters": {
        "conjunction": "or",
        "items": [
            {"filter": "filter:tasks:total_annotations", "operator": "greater", "type": "Number", "value": 0},
            {"filter": "filter:tasks:cancelled_annotations", "operator": "greater", "type": "Number", "value": 0},
        ],
    }
}
CHUNK = 1000  # task ids per UPDATE


def sync_project(client: LabelStudio, row: LabelingProject) -> LabelingProject:
    """Progress and each task's state read back from Label Studio; the project's open pages told when the progress
    changed (so the reconcile, which mostly finds nothing new, tells nobody anything).

    Only the tasks with annotations are read (the Data Manager's filter on Label Studio's own counters) and the
    total from the project: 1,000 annotations of a 10,000-task project are 1,000 tasks read, not 10,000
    (bench/labeling.py). Task states change in one UPDATE per state and CHUNK tasks."""
    tasks = list(client.list_tasks(row.ls_project_id, query=ANNOTATED))
    total = client.get_project(row.ls_project_id).get("task_number")
    users = {u["id"]: u.get("email") or str(u["id"]) for u in client.request("GET", "/api/users/") or []}
    portal_rows = Annotation.objects.filter(task__labeling_project=row).values_list(
        "pk", "ls_annotation_id", "username"
    )
    present = {a.get("id") for t in tasks for a in t.get("annotations") or []}
    portal_names = {ls_id: name for _, ls_id, name in portal_rows if ls_id in present}
    # Deleted in Label Studio (ANNOTATIONS_DELETED): the portal's record of who made it goes too.
    gone = [pk for pk, ls_id, _ in portal_rows if ls_id not in present]
    for start in range(0, len(gone), 500):
        Annotation.objects.filter(pk__in=gone[start : start + 500]).delete()
    before = row.progress
    row.progress = progress(tasks, users, portal_names, total=total if isinstance(total, int) else None)
    row.synced_at = timezone.now()
    row.save(update_fields=["progress", "synced_at"])
    _store_states(row, {t["id"]: task_state(t) for t in tasks if "id" in t})
    if row.progress != before:
        publish_event(
            row.project_id, "labeling", row.pk, **{k: row.progress[k] for k in ("labeled", "skipped", "total")}
        )
    return row


def _store_states(row: LabelingProject, states: dict[int, str]) -> None:
    """`states`: Label Studio task id → state, for the tasks with annotations; every other task is to do."""
    mine = LabelingTask.objects.filter(labeling_project=row, ls_task_id__isnull=False)
    by_state: dict[str, list[int]] = {}
    for ls_id, state in states.items():
        by_state.setdefault(state, []).append(ls_id)
    for state, ids in by_state.items():
        for start in range(0, len(ids), CHUNK):
            mine.filter(ls_task_id__in=ids[start : start + CHUNK]).exclude(state=state).update(state=state)
    # Done before and no annotation now (deleted in Label Studio): to do again.
    undone = [pk for pk, ls_id in mine.exclude(state=LabelingTask.State.TODO).values_list("pk", "ls_task_id")
              if ls_id not in states]  # fmt: skip
    for start in range(0, len(undone), CHUNK):
        LabelingTask.objects.filter(pk__in=undone[start : start + CHUNK]).update(state=LabelingTask.State.TODO)
