"""How much a dataset version changed against the previous one: the share of rows changed (a multiset comparison of
the first table file's rows) and each feature's drift (the monitoring app's statistics, apps/monitoring/drift.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.utils.translation import gettext as _

from apps.datasets.analysis import TABULAR, extension, table_rows
from apps.datasets.models import DatasetVersion
from apps.monitoring import drift

MAX_ROWS = 100_000


class NotComparable(Exception):
    """The versions cannot be compared (the message says why)."""


def table(version: DatasetVersion) -> tuple[list[str], list[tuple[str, ...]]]:
    """(header, rows) of the version's first table file, up to MAX_ROWS rows."""
    files = [f for f in version.files.select_related("blob").order_by("path") if extension(f.path) in TABULAR]
    if not files:
        raise NotComparable(_("Dataset version %(ref)s has no table file (CSV, TSV, JSONL or Parquet).") % {
            "ref": version.ref})  # fmt: skip
    header, rows = table_rows(files[0].path, files[0].blob_id)
    out = []
    for count, row in enumerate(rows):
        if count >= MAX_ROWS:
            break
        out.append(tuple("" if v is None else str(v) for v in row))
    return list(header), out


def changed_percent(old: list[tuple[str, ...]], new: list[tuple[str, ...]]) -> float:
    """Rows changed, in % of the larger version: rows added and rows removed (a modified row is both) compared as
    multisets, the larger of the two counts. Identical tables: 0; nothing in common: 100."""
    before, after = Counter(old), Counter(new)
    added, removed = sum((after - before).values()), sum((before - after).values())
    size = max(len(old), len(new))
    return 100.0 * max(added, removed) / size if size else 0.0


def compare(previous: DatasetVersion, version: DatasetVersion, target: str = "") -> dict[str, Any]:
    """{"changed_percent", "features": {name: scores}, "score"} of `version` against `previous`; the features are the
    columns both have, `target` left out."""
    old_header, old_rows = table(previous)
    new_header, new_rows = table(version)
    names = [n for n in new_header if n in old_header and n != target]
    old_columns = {n: [row[old_header.index(n)] for row in old_rows if len(row) == len(old_header)] for n in names}
    new_columns = {n: [row[new_header.index(n)] for row in new_rows if len(row) == len(new_header)] for n in names}
    features = drift.compare(old_columns, new_columns) if old_rows and new_rows else {}
    return {
        "changed_percent": changed_percent(old_rows, new_rows),
        "features": features,
        "score": drift.overall(features),
    }
