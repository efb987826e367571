"""Where a tracking run's data came from: the dataset version it trained on (drift monitors' reference, the service
console's "use a row from the dataset")."""

from __future__ import annotations

import re

from apps.datasets.models import DatasetUsage, DatasetVersion, Direction
from apps.models.models import Run

SOURCE = re.compile(r"^(?P<name>[^@\s]+)@(?P<number>\d+)$")


def trained_on(run: Run) -> DatasetVersion | None:
    """The dataset version a tracking run trained on: what its pipeline task read (datasets' lineage), else a
    dataset input it logged that names a version of this project (`source` "name@number", MLflow's log-inputs)."""
    if run.source_task_id:
        usage = (
            DatasetUsage.objects.filter(task_run_id=run.source_task_id, direction=Direction.READ)
            .select_related("version__dataset")
            .first()
        )
        if usage is None and run.source_pipeline_run_id:
            usage = (
                DatasetUsage.objects.filter(pipeline_run_id=run.source_pipeline_run_id, direction=Direction.READ)
                .select_related("version__dataset")
                .first()
            )
        if usage is not None:
            return usage.version
    for item in run.inputs.order_by("pk"):
        context = (item.tags or {}).get("mlflow.data.context", "training")
        match = SOURCE.match(item.source or "")
        if match is None or context not in ("training", "train"):
            continue
        version = DatasetVersion.objects.filter(
            dataset__project_id=run.project_id, dataset__name=match["name"], number=int(match["number"])
        ).first()
        if version is not None:
            return version
    return None
