"""services.create_labeling_project against the session's real Label Studio."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from apps.labeling import server, services
from apps.labeling.client import LabelStudioUnavailable
from apps.labeling.models import LabelingProject, LabelingTask
from tests import factories

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def ls_projects() -> set[int]:
    with server.connect() as client:
        return {p["id"] for p in client.list_projects()}


def test_it_makes_an_image_classification_project_with_one_task_per_image(world, ls):
    version = factories.dataset_version(
        factories.dataset(world.project_a, world.alice, name="digits"),
        {"img/0.png": PNG, "img/1.png": PNG, "img/2.jpg": PNG, "README.md": b"not an image"},
    )
    row = services.create_labeling_project(
        world.project_a, world.alice, name="digits", dataset_version=version,
        kind="image_classification", labels=["zero", " one ", ""],
    )  # fmt: skip
    assert row.status == LabelingProject.Status.READY
    assert row.task_count == 3
    assert row.labels == ["zero", "one"]
    with server.connect() as client:
        project = client.get_project(row.ls_project_id)
        tasks = list(client.list_tasks(row.ls_project_id))
    assert project["title"] == "project-a/digits"
    assert '<Choice value="zero"/>' in project["label_config"]
    assert sorted(t["data"]["path"] for t in tasks) == ["img/0.png", "img/1.png", "img/2.jpg"]
    assert all(t["data"]["image"].startswith("http://portal.test/labeling/media/") for t in tasks)
    stored = dict(LabelingTask.objects.filter(labeling_project=row).values_list("ls_task_id", "path"))
    assert stored == {t["id"]: t["data"]["path"] for t in tasks}


def test_it_imports_text_rows_in_batches(world, ls, settings):
    settings.LABELING_IMPORT_BATCH = 2
    rows = "\n".join(json.dumps({"review": f"text {i}", "stars": i}) for i in range(5))
    version = factories.dataset_version(
        factories.dataset(world.project_a, world.alice, name="reviews"),
        {"a.jsonl": rows.encode() + b"\n\n", "b.csv": b"review,stars\ngood,5\n,1\nbad,1\n"},
    )
    row = services.create_labeling_project(
        world.project_a, world.alice, name="reviews", dataset_version=version,
        kind="text_classification", labels=["pos", "neg"], text_column="review",
    )  # fmt: skip
    assert row.task_count == 7  # 5 JSONL lines + 2 CSV rows with text (the empty one skipped)
    with server.connect() as client:
        texts = sorted(t["data"]["text"] for t in client.list_tasks(row.ls_project_id))
    assert texts == ["bad", "good", *(f"text {i}" for i in range(5))]


def test_raw_xml_is_validated_by_label_studio_and_nothing_is_written(world, ls):
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice), {"t.txt": b"a\nb\n"})
    before = ls_projects()
    bad = (
        '<View><Text name="text" value="$text"/><Choices name="c" toName="nowhere"><Choice value="x"/></Choices></View>'
    )
    with pytest.raises(ValidationError) as caught:
        services.create_labeling_project(
            world.project_a, world.alice, name="bad", dataset_version=version, kind="xml", label_config=bad
        )
    assert "nowhere" in " ".join(caught.value.message_dict["label_config"])
    assert not LabelingProject.objects.exists()
    assert not LabelingTask.objects.exists()
    assert ls_projects() == before


def test_ner_project_from_text_lines(world, ls):
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice), {"t.txt": b"Ada in London\n"})
    row = services.create_labeling_project(
        world.project_a, world.alice, name="ner", dataset_version=version, kind="ner", labels=["PER", "LOC"]
    )
    with server.connect() as client:
        config = client.get_project(row.ls_project_id)["label_config"]
    assert '<Labels name="label" toName="text"><Label value="PER"/><Label value="LOC"/></Labels>' in config


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"labels": []}, "labels", "at least one label"),
        ({"labels": ["a", "a"]}, "labels", "only once"),
        ({"name": ""}, "name", "name"),
        ({"kind": "audio"}, "kind", "kinds"),
        ({"kind": "text_classification"}, "dataset_version", "no text"),
    ],
)
def test_bad_input_is_refused_by_field_before_label_studio_is_asked(world, settings, fields, field, message):
    settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "http://127.0.0.1:9", "x"  # nothing listens there
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice), {"a.png": PNG})
    kwargs = {"name": "p", "dataset_version": version, "kind": "image_classification", "labels": ["a"], **fields}
    with pytest.raises(ValidationError) as caught:
        services.create_labeling_project(world.project_a, world.alice, **kwargs)
    assert message in " ".join(caught.value.message_dict[field])


def test_a_version_of_another_project_is_refused(world, settings):
    version = factories.dataset_version(factories.dataset(world.project_b, world.charlie), {"a.png": PNG})
    with pytest.raises(ValidationError) as caught:
        services.create_labeling_project(
            world.project_a, world.alice, name="p", dataset_version=version, kind="image_classification", labels=["a"]
        )
    assert "dataset_version" in caught.value.message_dict


def test_label_studio_down_says_so_and_writes_nothing(world, settings):
    settings.LABELING = "on"
    settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "http://127.0.0.1:9", "x"
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice), {"a.png": PNG})
    with pytest.raises(LabelStudioUnavailable, match="cannot be reached"):
        services.create_labeling_project(
            world.project_a, world.alice, name="p", dataset_version=version, kind="image_classification", labels=["a"]
        )
    assert not LabelingProject.objects.exists()
    assert not LabelingTask.objects.exists()


def test_import_batches_close_at_the_count_or_at_the_size_of_their_text():
    assert list(services._batches([None] * 5, 2, 10**6)) == [(0, 2), (2, 4), (4, 5)]
    text = "x" * 1000  # 1,300 bytes with the task's overhead
    assert list(services._batches([text] * 3, 10, 2500)) == [(0, 1), (1, 2), (2, 3)]
    assert list(services._batches([text] * 3, 10, 4000)) == [(0, 3)]
    assert list(services._batches(["x" * 5000], 10, 100)) == [(0, 1)]  # a text larger than the size goes alone
    assert list(services._batches([], 10, 100)) == []
