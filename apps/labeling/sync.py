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
from apps.labeling.models import LabelingProject

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


def progress(tasks: list[dict[str, Any]], users: dict[int, str]) -> dict[str, Any]:
    """labeled / skipped / total, annotations per annotator, and pairwise agreement where a task has several."""
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
            per_annotator[users.get(who, str(who))] += 1
        results = [_canonical(a.get("result") or []) for a in done]
        for first, second in itertools.combinations(results, 2):
            pairs += 1
            agreeing += first == second
    return {
        "labeled": labeled,
        "skipped": skipped,
        "total": len(tasks),
        "annotators": dict(sorted(per_annotator.items())),
        "agreement": round(agreeing / pairs, 4) if pairs else None,
        "compared_pairs": pairs,
    }


def _canonical(result: list[dict[str, Any]]) -> str:
    """What an annotation says, without ids and sizes: the (from_name, value) pairs, sorted."""
    items = sorted(json.dumps([r.get("from_name"), r.get("value")], sort_keys=True) for r in result)
    return "|".join(items)


def sync_project(client: LabelStudio, row: LabelingProject) -> LabelingProject:
    tasks = list(client.list_tasks(row.ls_project_id))
    users = {u["id"]: u.get("email") or str(u["id"]) for u in client.request("GET", "/api/users/") or []}
    row.progress = progress(tasks, users)
    row.synced_at = timezone.now()
    row.save(update_fields=["progress", "synced_at"])
    return row
