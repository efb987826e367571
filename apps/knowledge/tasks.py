"""Celery entry points of knowledge bases. Each takes ids and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from apps.knowledge import services


@shared_task(ignore_result=True)
def ingest_document(pk: int) -> None:
    """Extract, chunk and embed one document (a claimed row only: a second run finds nothing pending)."""
    services.ingest_document(pk)
