"""Labeling projects from the SDK and `portal labeling`, against a real Label Studio: create from a dataset version,
list, progress, export the annotations as a new dataset version; exporting nothing, another tenant's project and a
dataset version of another project are clear errors."""

from __future__ import annotations

import json

import pytest
from portal_client import BadRequest, NotFound

from apps.labeling import server
from apps.labeling.models import LabelingProject
from tests import factories
from tests.client.expect import fails
from tests.client.test_cli import logged_in  # noqa: F401 - fixture
from tests.factories import make_token
from tests.labeling.conftest import blob_store, label_studio, ls  # noqa: F401 - fixtures (a real Label Studio)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_create_progress_and_export_from_the_command_line(logged_in, cli, ls):  # noqa: F811
    world = logged_in.world
    factories.dataset_version(
        factories.dataset(world.project_a, world.alice, name="reviews"), {"r.txt": b"great\nawful\n"}
    )

    made = cli("labeling", "create", "sentiment", "--dataset", "project-a/reviews@1", "--kind", "text_classification",
               "--label", "pos", "--label", "neg", "-o", "json")  # fmt: skip
    assert made.exit_code == 0, made.output
    body = json.loads(made.stdout)
    assert (body["project"], body["dataset"], body["labels"], body["task_count"]) == (
        "project-a", "reviews@1", ["pos", "neg"], 2,
    )  # fmt: skip
    listed = cli("labeling", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "KIND", "DATASET", "STATUS", "TASK_COUNT"]
    assert "sentiment" in listed.stdout
    progress = json.loads(cli("labeling", "progress", "project-a/sentiment", "--json").stdout)
    assert (progress["name"], progress["task_count"]) == ("sentiment", 2)

    empty = cli("labeling", "export", "project-a/sentiment")
    assert empty.exit_code == 2
    assert "Nothing is annotated" in empty.stderr

    row = LabelingProject.objects.get(pk=body["id"])
    choice = [{"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": ["pos"]}}]
    with server.connect() as client:
        task = next(t for t in client.list_tasks(row.ls_project_id) if t["data"]["text"] == "great")
        client.request("POST", f"/api/tasks/{task['id']}/annotations/", json={"result": choice})
    exported = cli("labeling", "export", str(row.pk), "-o", "json")
    assert exported.exit_code == 0, exported.output
    answer = json.loads(exported.stdout)
    assert (answer["ref"], answer["annotated_tasks"]) == ("sentiment-labels@1", 1)

    fails(cli("labeling", "delete", "project-a/sentiment", env={"PORTAL_TOKEN": make_token(world.charlie)}), 6)
    gone = cli("labeling", "delete", "project-a/sentiment")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted labeling project project-a/sentiment.")
    assert not LabelingProject.objects.exists()


def test_command_line_errors_before_label_studio_is_asked(logged_in, cli):  # noqa: F811
    """Wrong references fail with the portal's answer, whether or not a Label Studio runs."""
    fails(cli("labeling", "create", "peek", "--dataset", "project-a/none@1", "--kind", "text_classification"), 6)
    fails(cli("labeling", "create", "peek", "--dataset", "project-a/none@1"), 2, "--kind")
    fails(cli("labeling", "progress", "project-a/none"), 6, "No labeling project “none”")
    fails(cli("labeling", "list", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")
    fails(cli("labeling", "delete", "999999"), 6)


def test_the_sdk_answers_clear_errors(portal, ls):  # noqa: F811
    world = portal.world
    theirs = factories.dataset_version(
        factories.dataset(world.project_b, world.charlie, name="private"), {"r.txt": b"x\n"}
    )
    with portal.client() as alice:
        with pytest.raises(BadRequest) as bad:
            alice.labeling.create("project-a", "peek", theirs.pk, "text_classification", ["a"])
        assert bad.value.errors == {"dataset_version": ["Choose a dataset version of this project."]}
        assert list(alice.labeling.list()) == []
    with portal.client(world.charlie) as charlie:
        made = charlie.labeling.create("project-b", "mine", theirs.pk, "text_classification", ["a", "b"])
        assert [p.name for p in charlie.labeling.list("project-b")] == ["mine"]
    with portal.client() as alice:
        with pytest.raises(NotFound):
            alice.labeling.progress(made.id)
        with pytest.raises(NotFound):
            alice.labeling.export(made.id)
    assert LabelingProject.objects.count() == 1
