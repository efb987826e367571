"""Annotations → a new, immutable dataset version, with lineage (LabelingExport).

The version holds Label Studio's JSON export (`annotations.json`) and what the SDK's converter makes of it for the
project's kind (run in `.venv-labelstudio`, `convert.py`):

- object detection: `coco.json` (COCO, boxes in pixels) and YOLO (`classes.txt`, `labels/*.txt`, `notes.json`), with
  the images under `images/` named as both refer to them — the same blobs as the source version, nothing copied;
- image or text classification: `labels.csv` (the converter's CSV), plus, for images, the images at their paths;
- named entities and raw XML: the JSON export only.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.datasets.models import Dataset
from apps.datasets.services import create_dataset, create_version, store_file
from apps.labeling import configs, server
from apps.labeling.models import LabelingExport, LabelingProject

FORMATS = {
    LabelingProject.Kind.OBJECT_DETECTION: ["COCO", "YOLO"],
    LabelingProject.Kind.IMAGE_CLASSIFICATION: ["CSV"],
    LabelingProject.Kind.TEXT_CLASSIFICATION: ["CSV"],
}
CONVERT_TIMEOUT = 600


def export_annotations(row: LabelingProject, user: Any) -> LabelingExport:
    if row.ls_project_id is None:
        raise ValidationError({"labeling_project": [_("This labeling project has no Label Studio project.")]})
    with server.connect() as client:
        tasks = client.request(
            "GET",
            f"/api/projects/{row.ls_project_id}/export",
            params={"exportType": "JSON", "download_all_tasks": "true"},
        )
    annotated = sum(1 for t in tasks if any(not a.get("was_cancelled") for a in t.get("annotations") or []))
    if not annotated:
        raise ValidationError({"labeling_project": [_("Nothing is annotated yet.")]})
    key = configs.data_key(row.kind, row.label_config)
    images = row.kind in configs.IMAGE_KINDS
    for task in tasks:  # the dataset's path instead of the signed link: what the exported files refer to
        if images and task.get("data", {}).get("path"):
            task["data"][key] = task["data"]["path"]
    formats = FORMATS.get(row.kind, [])
    source = {f.path: (f.blob_id, f.size) for f in row.dataset_version.files.all()}
    with tempfile.TemporaryDirectory(prefix="labeling-export-") as tmp:
        folder = Path(tmp)
        (folder / "annotations.json").write_text(json.dumps(tasks, ensure_ascii=False, indent=1))
        manifest = {"annotations.json": store_file(folder / "annotations.json")}
        if formats:
            convert(row.label_config, folder / "annotations.json", folder / "out", formats)
            manifest.update(converted_files(row, tasks, folder / "out", source))
        with transaction.atomic():
            dataset = labels_dataset(row, user)
            version = create_version(
                dataset, manifest, user=user, message=_("Annotations of labeling project %(name)s") % {"name": row.name}
            )
            return LabelingExport.objects.create(
                labeling_project=row, version=version, formats=["JSON", *formats], annotated_tasks=annotated,
                created_by=user if getattr(user, "pk", None) else None,
            )  # fmt: skip


def convert(label_config: str, export: Path, out: Path, formats: list[str]) -> None:
    """The SDK's converter, in Label Studio's venv (a subprocess: the portal's venv cannot hold the SDK)."""
    config = export.parent / "config.xml"
    config.write_text(label_config)
    python = Path(settings.LABEL_STUDIO_VENV) / "bin" / "python"
    command = [str(python), "-m", "apps.labeling.convert", "--config", str(config), "--input", str(export)]
    command += ["--out", str(out), *[arg for name in formats for arg in ("--format", name)]]
    done = subprocess.run(
        command, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=CONVERT_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the converter failed ({done.returncode}): {done.stderr[-2000:]}")


def converted_files(
    row: LabelingProject, tasks: list[dict], out: Path, source: dict[str, tuple[str, int]]
) -> dict[str, tuple[str, int]]:
    manifest: dict[str, tuple[str, int]] = {}
    if (out / "COCO" / "result.json").exists():
        coco = json.loads((out / "COCO" / "result.json").read_text())
        # The converter names images by a hash of their reference, in the order of the tasks: the same blobs
        # go into the version under those names, so that COCO's file_name and YOLO's labels/ both find them.
        for image, task in zip(coco["images"], tasks, strict=False):
            path = task.get("data", {}).get("path")
            if path in source:
                manifest[image["file_name"].replace("\\/", "/")] = source[path]
        manifest["coco.json"] = store_file(out / "COCO" / "result.json")
    if (out / "YOLO").exists():
        for file in sorted((out / "YOLO").rglob("*")):
            if file.is_file():
                manifest[file.relative_to(out / "YOLO").as_posix()] = store_file(file)
    if (out / "CSV").exists():
        (csv_file,) = list((out / "CSV").rglob("*.csv"))
        manifest["labels.csv"] = store_file(csv_file)
        if row.kind == LabelingProject.Kind.IMAGE_CLASSIFICATION:
            for task in tasks:
                path = task.get("data", {}).get("path")
                if path in source:
                    manifest[path] = source[path]
    return manifest


def labels_dataset_name(row: LabelingProject) -> str:
    return f"{slugify(row.name)[:80] or 'labeling'}-labels"


def labels_dataset(row: LabelingProject, user: Any) -> Dataset:
    """The dataset a labeling project's exports go to: `<name>-labels`, made on the first export."""
    name = labels_dataset_name(row)
    existing = Dataset.objects.filter(project=row.project, name=name).first()
    if existing is not None:
        return existing
    return create_dataset(
        row.project, user, name=name, description=_("Annotations exported from labeling project %(name)s") % {
            "name": row.name}, source=f"labeling:{row.pk}",
    )  # fmt: skip
