"""The serving part of `manage.py demo`: the iris classifier served as `iris`, following the alias the demo's iris
pipeline sets ("staging" of "iris-classifier", by its model-register step). Until the pipeline has run, the service
waits ("waiting for a version at alias staging …") and deploys when the alias appears (apps/serving/signals.py)."""

from __future__ import annotations

from typing import Any

from apps.models.models import RegisteredModel
from apps.projects.models import Project
from apps.serving.models import InferenceService
from apps.serving.services import create_service

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
