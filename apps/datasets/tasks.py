"""Celery tasks of datasets: analysis after commit, and the sweep of stale uploads and unused blobs."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.datasets import analysis
from apps.datasets.models import AnalysisStatus, DatasetVersion

logger = logging.getLogger(__name__)

MAX_ANALYZED_FILES = 500
MAX_THUMBNAILS = 60


@shared_task
def analyze_version(version_id: int) -> None:
    """Schema, statistics and previews of a committed version. Idempotent: running it again recomputes."""
    version = DatasetVersion.objects.filter(pk=version_id).first()
    if version is None:
        return
    schema: dict = {}
    statistics: dict = {}
    previews: dict = {}
    thumbs = 0
    errors = []
    for entry in version.files.all()[:MAX_ANALYZED_FILES]:
        kind = analysis.kind_of(entry.path)
        try:
            if kind == "table":
                result = analysis.analyze_table(entry.path, entry.blob_id)
                schema[entry.path] = result["columns"]
                statistics[entry.path] = {"row_count": result["row_count"], "columns": result["stats"]}
                previews[entry.path] = {k: result[k] for k in ("kind", "format", "columns", "rows", "row_count")}
            elif kind == "image" and thumbs < MAX_THUMBNAILS:
                previews[entry.path] = analysis.preview_image(entry.blob_id, entry.size)
                thumbs += 1
            elif kind == "text":
                previews[entry.path] = analysis.preview_text(entry.blob_id)
            else:
                previews[entry.path] = {"kind": "none", "message": analysis.no_preview_message(entry.path)}
        except Exception as exc:  # one bad file must not hide the others' statistics
            logger.warning("analysis of %s in version %s failed: %s", entry.path, version.pk, exc)
            previews[entry.path] = {"kind": "error", "message": f"{type(exc).__name__}: {exc}"}
            errors.append(f"{entry.path}: {exc}")
    version.schema, version.statistics, version.previews = schema, statistics, previews
    version.analysis_status = AnalysisStatus.FAILED if errors and not (schema or previews) else AnalysisStatus.READY
    version.analysis_error = "\n".join(errors)[:5000]
    version.save(update_fields=["schema", "statistics", "previews", "analysis_status", "analysis_error"])


@shared_task
def cleanup_uploads() -> dict:
    """Abort uploads idle for a day (their staged chunks go) and purge blobs nothing uses any more."""
    from apps.datasets.services import purge_unused_blobs
    from apps.datasets.uploads import cleanup_stale_uploads

    aborted = cleanup_stale_uploads()
    purged = purge_unused_blobs()
    return {"aborted": aborted, "purged": len(purged)}
