"""Annotations exported as a new dataset version: LS JSON + COCO/YOLO for boxes, CSV for classification, lineage."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.exceptions import ValidationError

from apps.datasets import blobs
from apps.labeling import server
from apps.labeling.export import export_annotations
from apps.labeling.models import LabelingExport
from apps.labeling.services import create_labeling_project
from tests import factories
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


def read(version, path: str) -> bytes:
    return b"".join(blobs.open_chunks(version.files.get(path=path).blob_id))


def box(label: str, x: float, y: float, w: float, h: float) -> dict:
    return {"from_name": "label", "to_name": "image", "type": "rectanglelabels", "original_width": 200,
            "original_height": 100, "image_rotation": 0,
            "value": {"x": x, "y": y, "width": w, "height": h, "rotation": 0, "rectanglelabels": [label]}}  # fmt: skip


def annotate(row, results_by_path: dict[str, list[dict]]) -> None:
    with server.connect() as client:
        for task in client.list_tasks(row.ls_project_id):
            result = results_by_path.get(task["data"]["path"])
            if result is not None:
                client.request("POST", f"/api/tasks/{task['id']}/annotations/", json={"result": result})


def test_boxes_become_coco_and_yolo_over_the_same_image_blobs(world, ls):
    source = factories.dataset_version(
        factories.dataset(world.project_a, world.alice, name="street"),
        {"a.png": b"\x89PNG-a", "b.png": b"\x89PNG-b", "c.png": b"\x89PNG-c"},
    )
    row = create_labeling_project(
        world.project_a, world.alice, name="Street boxes", dataset_version=source, kind="object_detection",
        labels=["car", "person"],
    )  # fmt: skip
    annotate(row, {"a.png": [box("car", 10, 20, 50, 40)], "b.png": [box("person", 0, 0, 25, 50)]})
    made = export_annotations(row, world.alice)
    version = made.version
    assert (version.dataset.name, version.number) == ("street-boxes-labels", 1)
    assert made.formats == ["JSON", "COCO", "YOLO"]
    assert made.annotated_tasks == 2
    assert LabelingExport.objects.get().labeling_project == row  # lineage
    paths = set(version.files.values_list("path", flat=True))
    assert {"annotations.json", "coco.json", "classes.txt", "notes.json"} <= paths
    exported = json.loads(read(version, "annotations.json"))
    assert sorted(t["data"]["image"] for t in exported) == ["a.png", "b.png", "c.png"]

    coco = json.loads(read(version, "coco.json"))
    assert [c["name"] for c in coco["categories"]] == ["car", "person"]
    bboxes = sorted((a["category_id"], a["bbox"]) for a in coco["annotations"])
    assert bboxes == [(0, [20.0, 20.0, 100.0, 40.0]), (1, [0.0, 0.0, 50.0, 50.0])]  # percent → pixels of 200×100
    source_blobs = {f.blob_id for f in source.files.all()}
    for image in coco["images"]:  # every image COCO names is in the version, as the source's blob (no copy)
        assert version.files.get(path=image["file_name"]).blob_id in source_blobs

    assert read(version, "classes.txt").decode().split() == ["car", "person"]
    yolo = {p: read(version, p).decode().split() for p in paths if p.startswith("labels/")}
    assert sorted(tuple(v) for v in yolo.values() if v) == [
        ("0", "0.35", "0.4", "0.5", "0.4"),
        ("1", "0.125", "0.25", "0.25", "0.5"),
    ]
    for label_file in yolo:  # YOLO's labels/x.txt sit beside images/x.png
        stem = label_file.removeprefix("labels/").removesuffix(".txt")
        assert any(p.startswith(f"images/{stem}.") for p in paths)


def test_classification_becomes_csv_and_the_api_answers_with_the_version(world, ls):
    source = factories.dataset_version(
        factories.dataset(world.project_a, world.alice, name="reviews"), {"r.txt": b"great\nawful\n"}
    )
    row = create_labeling_project(
        world.project_a, world.alice, name="sentiment", dataset_version=source, kind="text_classification",
        labels=["pos", "neg"],
    )  # fmt: skip
    choice = [{"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": ["pos"]}}]
    with server.connect() as client:
        task = next(t for t in client.list_tasks(row.ls_project_id) if t["data"]["text"] == "great")
        client.request("POST", f"/api/tasks/{task['id']}/annotations/", json={"result": choice})
    response = user_client(world.bob).post(f"/api/v1/labeling-projects/{row.pk}/export/")
    assert response.status_code == 201, response.content
    made = LabelingExport.objects.get()
    assert response.json()["ref"] == made.version.ref == "sentiment-labels@1"
    rows = list(csv.DictReader(io.StringIO(read(made.version, "labels.csv").decode())))
    assert sorted((r["text"], r["label"]) for r in rows) == [("awful", ""), ("great", "pos")]  # every task


def test_nothing_annotated_is_refused(world, ls):
    source = factories.dataset_version(factories.dataset(world.project_a, world.alice), {"r.txt": b"x\n"})
    row = create_labeling_project(
        world.project_a, world.alice, name="empty", dataset_version=source, kind="ner", labels=["A"]
    )
    with pytest.raises(ValidationError, match="Nothing is annotated"):
        export_annotations(row, world.alice)
    assert not LabelingExport.objects.exists()
