"""The knowledge part of `manage.py demo`: a knowledge base `portal-docs` over the portal's own README and docs/,
queued for ingestion (the worker ingests it; `make run` starts one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from apps.knowledge import services
from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Project

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
