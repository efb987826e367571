"""The preview of one file: the analysis task's result when it is there, else computed now (first rows only)."""

from __future__ import annotations

from typing import Any

from apps.datasets import analysis
from apps.datasets.analysis import NoPreview
from apps.datasets.models import DatasetVersion, VersionFile

__all__ = ["NoPreview", "preview_for"]


def preview_for(version: DatasetVersion, entry: VersionFile) -> dict[str, Any]:
    """Raises NoPreview ("No preview for .xyz files…") for formats without one."""
    if analysis.kind_of(entry.path) == "none":
        raise NoPreview(analysis.no_preview_message(entry.path))
    stored = (version.previews or {}).get(entry.path)
    if stored:
        return stored
    return analysis.preview_file(entry.path, entry.blob_id, entry.size)
