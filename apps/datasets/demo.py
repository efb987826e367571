"""The datasets part of `manage.py demo`: the iris dataset (scikit-learn's bundled copy) in two versions."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

from apps.datasets import services
from apps.datasets.models import AnalysisStatus, Dataset
from apps.datasets.tasks import analyze_version
from apps.projects.models import Project

COLUMNS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def _write_iris(path: Path, *, derived: bool) -> None:
    from sklearn.datasets import load_iris

    iris = load_iris()
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS + (["petal_ratio"] if derived else []) + ["species"])
        for features, target in zip(iris.data, iris.target, strict=True):
            row = [f"{v:.1f}" for v in features]
            if derived:
                row.append(f"{features[2] / features[3]:.4f}")
            writer.writerow([*row, iris.target_names[target]])


def populate(project: Project, user: Any) -> Dataset:
    """Idempotently: dataset "iris" with v1 (the 150 rows) and v2 (plus a derived petal_ratio column)."""
    dataset = Dataset.objects.filter(project=project, name="iris").first()
    if dataset is None:
        dataset = services.create_dataset(
            project, user, name="iris", description="Fisher's iris flowers: 150 rows, 4 measurements and the species.",
            tags=["tabular", "classification", "demo"], licence="CC0-1.0",
            source="scikit-learn's bundled copy (sklearn.datasets.load_iris)",
        )  # fmt: skip
    existing = dataset.versions.count()
    for number, derived, message in ((1, False, "The 150 rows as published"), (2, True, "Add petal_ratio")):
        if existing >= number:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            _write_iris(Path(tmp) / "iris.csv", derived=derived)
            (Path(tmp) / "README.md").write_text(
                "# iris\n\nR. A. Fisher (1936). 50 flowers of each of three species.\n"
                + ("\n`petal_ratio` = petal_length / petal_width.\n" if derived else "")
            )
            services.version_from_directory(dataset, Path(tmp), user=user, message=message)
    for version in dataset.versions.filter(analysis_status=AnalysisStatus.PENDING):
        analyze_version(version.pk)  # small: show statistics at once, even before a worker runs
    return dataset
