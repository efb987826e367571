"""The knowledge part of `manage.py demo`: a knowledge base `portal-docs` over the portal's own README and docs/,
queued for ingestion (the worker ingests it; `make run` starts one), answered by the demo's `chat` service (the
packaged chat model, apps/serving/demo.py) where the llm environment is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from apps.knowledge import services
from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Project
from apps.serving.models import InferenceService

NAME = "portal-docs"


def sources() -> list[Path]:
    base = Path(settings.BASE_DIR)
    return [p for p in [base / "README.md", *sorted((base / "docs").glob("*.md"))] if p.is_file()]


def populate(project: Project, user: Any) -> KnowledgeBase:
    """Idempotently: the base and one document per file; a file changed since the last run is its next version."""
    kb = KnowledgeBase.objects.filter(project=project, name=NAME).first() or services.create_knowledge_base(
        project, user, NAME, description="The portal's own README and docs/: ask how to run, test or deploy it."
    )
    base = Path(settings.BASE_DIR)
    for path in sources():
        services.add_document(kb, user, str(path.relative_to(base)), path.read_bytes(), tags=["docs"])
    return kb


def wire_chat(project: Project, service: InferenceService | None) -> KnowledgeBase | None:
    """The demo base answers with `service` unless someone gave it another model (an endpoint or a service)."""
    kb = KnowledgeBase.objects.filter(project=project, name=NAME).first()
    if kb is None or service is None or kb.llm_service_id or kb.llm_url:
        return kb
    return services.update_knowledge_base(kb, llm_service=service)
