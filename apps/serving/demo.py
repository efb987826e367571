"""The serving part of `manage.py demo`: the iris classifier served as `iris`, following the alias the demo's iris
pipeline sets ("staging" of "iris-classifier", by its model-register step). Until the pipeline has run, the service
waits ("waiting for a version at alias staging …") and deploys when the alias appears (apps/serving/signals.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.models.models import RegisteredModel
from apps.outbox.services import enqueue
from apps.projects.models import Project
from apps.serving.models import InferenceService
from apps.serving.services import create_service
from apps.serving.tasks import deploy_when_possible

SERVICE = "iris"
MODEL = "iris-classifier"
ALIAS = "staging"  # what apps/jobs/demo.py's "register" node moves


def populate(project: Project, user: Any) -> InferenceService | None:
    """Idempotently: the `iris` service; deployed at once when the alias already points at a version and an agent
    runs (otherwise it says why it waits)."""
    existing = InferenceService.objects.filter(project=project, name=SERVICE).first()
    if existing is not None:
        return existing
    model = RegisteredModel.objects.filter(project=project, name=MODEL).first()
    if model is None:
        return None
    # Following an alias, it deploys at once when the alias points somewhere and an agent runs; otherwise it says why
    # it waits, and deploys when the alias next moves, or from its page.
    return create_service(
        project,
        user,
        name=SERVICE,
        allow_waiting=True,
        registered_model=model,
        follow_alias=ALIAS,
        description="The iris classifier the demo pipeline trains, served over the Open Inference Protocol v2.",
        cpu="0.5",
        memory="512Mi",
        min_replicas=1,
        max_replicas=2,
        scale_target=8,
    )


CHAT = "chat"
CHAT_DEPLOY_WAIT = 15 * 60  # seconds the demo's chat service waits for an agent to start it


def chat_service(project: Project, user: Any) -> InferenceService | None:
    """Idempotently: `chat`, an `llm` service of the packaged SmolLM2-135M-Instruct that the demo's knowledge base
    answers with, when the llm task environment is built (`make llm-env`, a step of `make run`; None otherwise).
    The demo runs before `make run` starts the agent, so it is deployed by a task that waits for one; a `chat` made
    by a run before that never started (or whose start failed) is queued again."""
    existing = InferenceService.objects.filter(project=project, name=CHAT).first()
    if existing is None:
        if not Path(settings.PORTAL_TASK_ENVS["llm"]).exists():
            return None
        existing = create_service(
            project,
            user,
            name=CHAT,
            framework="llm",
            description="SmolLM2-135M-Instruct (packaged) answering the portal-docs knowledge base over OpenAI's API.",
            cpu="1",
            memory="2Gi",
            min_replicas=1,
            max_replicas=1,
            scale_target=1,
        )
    waiting = (InferenceService.Status.PENDING, InferenceService.Status.FAILED)
    if existing.framework == "llm" and existing.current_revision_id is None and existing.status in waiting:
        enqueue(deploy_when_possible, existing.pk, getattr(user, "pk", None), time.time() + CHAT_DEPLOY_WAIT)
    return existing
