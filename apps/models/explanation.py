"""What the explain template recorded about a version (docs/explainability.md): the tracking run it tagged the version
with (`portal.explanation`) and that run's feature_importance.json table (feature, importance, std; most important
first) and explanation.json (the method). The version page shows it as a bar chart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apps.jobs.builtin_tasks.explain import EXPLANATION, RUN_TAG, TABLE
from apps.models import artifacts
from apps.models.models import ModelVersion, Run

MAX_BYTES = 256 * 1024  # a row per feature; anything larger is not what the template wrote
MAX_FEATURES = 50  # the chart's bars: the most important ones


@dataclass(frozen=True)
class Explanation:
    run: Run
    method: str
    rows: int
    features: list[str]  # most important first
    importances: list[float]
    total: int  # features in the table (more than charted when over MAX_FEATURES)

    def pairs(self) -> list[tuple[str, float]]:
        return list(zip(self.features, self.importances, strict=True))

    def chart(self) -> dict[str, Any]:
        """The chart's data (json_script): the bars bottom-up, the most important one on top."""
        return {"features": self.features[::-1], "importances": self.importances[::-1], "method": self.method}


def _read_json(root: str, name: str) -> Any:
    handle = artifacts.open_file(f"{root}/{name}")
    if handle is None:
        return None
    with handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def explanation_of(version: ModelVersion) -> Explanation | None:
    """The explanation the tag `portal.explanation` points at, in the version's project (else None, as for a table
    not of the template's shape). Expects the version's tags prefetched."""
    run_id = next((t.value for t in version.tags.all() if t.key == RUN_TAG), "")
    if not run_id or len(run_id) > 32:
        return None
    run = Run.objects.filter(project_id=version.registered_model.project_id, run_uuid=run_id).first()
    if run is None or not run.artifact_uri.startswith("mlflow-artifacts:"):
        return None
    root = artifacts.clean_path(run.artifact_uri.removeprefix("mlflow-artifacts:").strip("/"))
    table = _read_json(root, TABLE)
    if not isinstance(table, dict) or table.get("columns", [])[:2] != ["feature", "importance"]:
        return None
    rows = table.get("data")
    if not isinstance(rows, list):
        return None
    features, importances = [], []
    for row in rows:
        if not (isinstance(row, list) and len(row) >= 2 and isinstance(row[0], str)):
            return None
        if not isinstance(row[1], int | float) or isinstance(row[1], bool):
            return None
        features.append(row[0])
        importances.append(float(row[1]))
    meta = _read_json(root, EXPLANATION)
    method = str(meta.get("method", "")) if isinstance(meta, dict) else ""
    count = int(meta.get("rows", 0)) if isinstance(meta, dict) and isinstance(meta.get("rows"), int) else 0
    return Explanation(
        run, method[:40], count, features[:MAX_FEATURES], importances[:MAX_FEATURES], total=len(features)
    )
