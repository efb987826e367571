"""Serving listens to the model registry: when an alias is set or moved (through the registry service, whichever
entry point called it: pages, the API, the MLflow API, a pipeline's model-register task), the services following
it roll out the version it points at now — after the commit, on a worker."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models.signals import post_save

from apps.models.models import ModelAlias
from apps.outbox.services import enqueue
from apps.serving.models import InferenceService
from apps.serving.tasks import follow_alias

logger = logging.getLogger(__name__)


def alias_saved(sender: type, instance: Any, **kwargs: Any) -> None:
    model_id, alias = instance.registered_model_id, instance.alias
    if not InferenceService.objects.filter(registered_model_id=model_id, follow_alias=alias).exists():
        return

    enqueue(follow_alias, model_id, alias)  # after the commit, and once the broker is back if it is down


def connect() -> None:
    post_save.connect(alias_saved, sender=ModelAlias, dispatch_uid="serving-follow-alias")
