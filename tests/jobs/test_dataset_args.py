"""Dataset arguments of job templates: checked when a pipeline is saved, pinned to an exact version when a
run starts, handed to the task as a read-only local folder, recorded as lineage, and part of the cache key."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from apps.datasets.models import DatasetUsage
from apps.jobs.models import JobTemplate, LogLine
from apps.jobs.services import save_pipeline, start_run
from tests.factories import ProjectFactory, UserFactory, dataset, dataset_version
from tests.jobs.conftest import drive

READER_SCHEMA = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "x-portal-type": "dataset", "title": "Data", "minLength": 1},
    },
    "required": ["data"],
    "additionalProperties": False,
}
# Prints what the task was given, and whether it may write there.
READER_CODE = (
    "import os, sys; d = sys.argv[sys.argv.index('--data') + 1]; print('path', d);"
    "print('content', open(os.path.join(d, 'data.csv')).read().strip().replace(chr(10), '|'));"
    "print('mode', oct(os.stat(os.path.join(d, 'data.csv')).st_mode & 0o777))"
)


@pytest.fixture
def reader(project):
    template, _ = JobTemplate.objects.update_or_create(
        project=project,
        slug="reader",
        version=1,
        defaults={
            "name": "reader",
            "command": ["{python}", "-c", READER_CODE],
            "args_schema": READER_SCHEMA,
            "resources": {"cpu": 0.1},
        },
    )
    return template


def reader_pipeline(project, owner, ref: str, **node):
    nodes = [{"name": "read", "template": "reader", "args": {"data": ref}, **node}]
    return save_pipeline(project, owner, name="reads", spec={"nodes": nodes})


def test_an_unknown_dataset_or_version_is_a_field_error_naming_node_and_argument(project, owner, reader):
    iris = dataset(project, owner, name="iris")
    dataset_version(iris)
    with pytest.raises(ValidationError) as unknown:
        reader_pipeline(project, owner, "nope")
    assert unknown.value.message_dict == {
        "nodes.read.args.data": ["There is no dataset “nope” in project “project-a”."]
    }
    with pytest.raises(ValidationError) as missing_version:
        reader_pipeline(project, owner, "iris@7")
    assert missing_version.value.message_dict["nodes.read.args.data"] == [
        "Dataset “iris” has no version 7 (newest: 1)."
    ]


def test_another_projects_dataset_is_unknown(project, owner, reader):
    other_owner = UserFactory(username="charlie")
    other = ProjectFactory(owner=other_owner, slug="project-b")
    dataset_version(dataset(other, other_owner, name="secret"))
    with pytest.raises(ValidationError) as error:
        reader_pipeline(project, owner, "secret")
    assert "There is no dataset “secret”" in error.value.message_dict["nodes.read.args.data"][0]


def test_a_run_reads_the_pinned_version_as_a_read_only_folder_and_records_it(agent, project, owner, reader):
    iris = dataset(project, owner, name="iris")
    first = dataset_version(iris, {"data.csv": b"a\n1\n"})
    pipe = reader_pipeline(project, owner, "iris@latest")
    run = start_run(pipe, owner)
    # a newer version committed after the start does not change what this run reads
    dataset_version(iris, {"data.csv": b"a\n2\n"})
    run = drive(run)
    assert run.status == "succeeded", run.reason
    assert run.spec["nodes"][0]["datasets"]["data"]["number"] == first.number
    lines = list(LogLine.objects.filter(run=run).order_by("seq").values_list("text", flat=True))
    assert lines[1:] == ["content a|1", "mode 0o444"]
    assert lines[0].startswith("path ")
    assert first.digest in lines[0]
    usage = DatasetUsage.objects.get(pipeline_run=run)
    assert (usage.version_id, usage.direction, usage.task_run.node) == (first.pk, "read", "read")
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("jobs:run-detail", kwargs={"project": project.slug, "pk": run.pk})).content.decode()
    version_url = reverse("datasets:version-detail", kwargs={"project": project.slug, "pk": first.pk})
    assert f'<a href="{version_url}">iris v1</a>' in page


def test_the_cache_misses_when_the_dataset_changes(agent, project, owner, reader):
    iris = dataset(project, owner, name="iris")
    dataset_version(iris, {"data.csv": b"a\n1\n"})
    pipe = reader_pipeline(project, owner, "iris")
    assert drive(start_run(pipe, owner)).tasks.get().status == "succeeded"
    assert drive(start_run(pipe, owner)).tasks.get().status == "cached"  # same data: the step is skipped
    dataset_version(iris, {"data.csv": b"a\n2\n"})
    again = drive(start_run(pipe, owner))
    assert again.tasks.get().status == "succeeded"  # new data: it runs again


def test_a_cached_node_records_the_reads_of_the_task_it_was_taken_from(agent, project, owner, reader):
    """Lineage: a run whose node came from the cache still read that dataset version (and a tracked run of a later
    node of it lists the version as its input)."""
    iris = dataset(project, owner, name="iris")
    version = dataset_version(iris, {"data.csv": b"a\n1\n"})
    pipe = reader_pipeline(project, owner, "iris")
    first = drive(start_run(pipe, owner))
    second = drive(start_run(pipe, owner))
    cached = second.tasks.get()
    assert cached.status == "cached"
    usage = DatasetUsage.objects.get(pipeline_run=second)
    assert (usage.version_id, usage.direction, usage.task_run_id) == (version.pk, "read", cached.pk)
    assert DatasetUsage.objects.filter(pipeline_run=first).count() == 1
