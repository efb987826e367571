"""The services the jobs app uses: resolve_dataset_arg, materialize, record_usage."""

from __future__ import annotations

import os
import stat

import pytest
from django.core.exceptions import ValidationError

from apps.datasets.models import DatasetUsage, DatasetVersion, Direction
from apps.datasets.services import DatasetRefError, materialize, record_usage, resolve_dataset_arg
from tests.access import make_run
from tests.factories import dataset, dataset_version


@pytest.mark.smoke
def test_resolve_dataset_arg_understands_name_latest_and_numbers(world):
    ds = dataset(world.project_a, world.alice)
    v1 = dataset_version(ds, {"a.csv": b"a\n1\n"})
    v2 = dataset_version(ds, {"a.csv": b"a\n2\n"})
    assert resolve_dataset_arg(world.project_a, "iris") == v2
    assert resolve_dataset_arg(world.project_a, "iris@latest") == v2
    assert resolve_dataset_arg(world.project_a, "iris@1") == v1


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope", "There is no dataset “nope” in project “project-a”."),
        ("iris@9", "Dataset “iris” has no version 9 (newest: 1)."),
        ("iris@v1", "“iris@v1” is not a dataset reference: use “name”, “name@latest” or “name@<number>”."),
        ("", "“” is not a dataset reference: use “name”, “name@latest” or “name@<number>”."),
    ],
)
def test_resolve_dataset_arg_explains_unknown_references(world, ref, message):
    dataset_version(dataset(world.project_a, world.alice))
    with pytest.raises(DatasetRefError) as excinfo:
        resolve_dataset_arg(world.project_a, ref)
    assert str(excinfo.value) == message
    assert isinstance(excinfo.value, ValueError)


def test_resolve_dataset_arg_does_not_cross_projects(world):
    dataset_version(dataset(world.project_b, world.charlie, name="secret"))
    with pytest.raises(DatasetRefError):
        resolve_dataset_arg(world.project_a, "secret")


def test_a_dataset_without_versions_cannot_resolve(world):
    dataset(world.project_a, world.alice)
    with pytest.raises(DatasetRefError, match="has no versions yet"):
        resolve_dataset_arg(world.project_a, "iris@latest")


@pytest.mark.smoke
def test_materialize_gives_a_read_only_cached_copy(world, settings):
    ds = dataset(world.project_a, world.alice)
    version = dataset_version(ds, {"a.csv": b"a\n1\n", "sub/b.txt": b"bee"})
    path = materialize(version)
    assert path == settings.PORTAL_WORK_DIR / "datasets" / version.digest
    assert (path / "a.csv").read_bytes() == b"a\n1\n"
    assert (path / "sub" / "b.txt").read_bytes() == b"bee"
    assert not os.stat(path / "a.csv").st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert not os.stat(path / "sub").st_mode & stat.S_IWUSR
    assert materialize(version) == path  # cached
    assert [p.name for p in path.parent.iterdir()] == [version.digest]  # no temporary leftovers


def test_equal_content_materializes_once(world):
    ds = dataset(world.project_a, world.alice)
    v1 = dataset_version(ds, {"a.csv": b"same"})
    v2 = dataset_version(ds, {"a.csv": b"same"})
    assert v1.digest == v2.digest
    assert materialize(v1) == materialize(v2)


def test_record_usage_links_runs_and_versions(world):
    version = dataset_version(dataset(world.project_a, world.alice))
    run = make_run(world.project_a, world.alice)
    task = run.tasks.create(node="train")
    usage = record_usage(version, task_run=task)
    assert (usage.pipeline_run, usage.task_run, usage.direction) == (run, task, "read")
    assert record_usage(version, task_run=task) == usage  # idempotent
    record_usage(version, pipeline_run=run, direction=Direction.WRITE)
    assert DatasetUsage.objects.filter(version=version).count() == 2
    with pytest.raises(ValueError, match="direction"):
        record_usage(version, pipeline_run=run, direction="sideways")


def test_a_committed_version_is_immutable(world):
    version = dataset_version(dataset(world.project_a, world.alice))
    version.digest = "0" * 64
    with pytest.raises(ValidationError, match="immutable"):
        version.save()
    with pytest.raises(ValidationError):
        version.save(update_fields=["digest"])
    version.refresh_from_db()
    version.message = "computed fields may change"
    version.save(update_fields=["message"])
    assert DatasetVersion.objects.get(pk=version.pk).message == "computed fields may change"
