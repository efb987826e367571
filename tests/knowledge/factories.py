"""Knowledge bases and documents for tests: real ingestion (extract, chunk, embed) of small texts."""

from __future__ import annotations

from typing import Any

from apps.knowledge import services
from apps.knowledge.models import Document, KnowledgeBase

HANDBOOK = b"""# Handbook

The team handbook of the platform group.

## Running the tests

Run `make test` from the repository root: it runs pytest against the embedded database.
Use `make test-postgres` to run them against PostgreSQL.

## Deploying

Deployments go through the release pipeline; tag a commit with `v1.2.3` and the pipeline ships it.

### Rollback

To roll back, re-deploy the previous tag from the releases page.
"""


def knowledge_base(project: Any, owner: Any, name: str | None = None, **fields: Any) -> KnowledgeBase:
    name = name or f"kb-{KnowledgeBase.objects.count() + 1}"
    return services.create_knowledge_base(project, owner, name, **fields)


def ingested(kb: KnowledgeBase, name: str = "handbook.md", data: bytes = HANDBOOK, **kwargs: Any) -> Document:
    """A document added and ingested at once (the task's body, called directly)."""
    doc, _changed = services.add_document(kb, kb.created_by, name, data, **kwargs)
    services.ingest_document(doc.pk)
    doc.refresh_from_db()
    return doc
