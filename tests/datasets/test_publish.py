"""`python -m apps.datasets.publish` from a pipeline task: the version records which run and task wrote it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from apps.accounts.services import create_token
from apps.datasets.models import DatasetUsage, DatasetVersion
from tests.access import make_run
from tests.factories import dataset, dataset_version

pytestmark = pytest.mark.live


def test_a_task_publishes_its_output_directory_with_lineage(world, live_asgi, tmp_path):
    ds = dataset(world.project_a, world.alice)
    dataset_version(ds, {"old.csv": b"a\n1\n"})
    run = make_run(world.project_a, world.alice)
    token, raw = create_token(world.alice, name="task", project=world.project_a)
    task = run.tasks.create(node="prepare", api_token=token)
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "train.csv").write_bytes(b"x,y\n1,2\n")
    (out / "sub" / "notes.txt").write_bytes(b"hello")
    env = {
        **os.environ,
        "PORTAL_API_URL": f"{live_asgi.url}/api/v1/",
        "PORTAL_API_TOKEN": raw,
        "PORTAL_PROJECT": world.project_a.slug,
    }
    result = subprocess.run(
        [sys.executable, "-m", "apps.datasets.publish", "iris", str(out), "-m", "from a task"],
        env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "published iris@2 (2 files" in result.stdout
    version = DatasetVersion.objects.get(dataset=ds, number=2)
    assert sorted(version.files.values_list("path", flat=True)) == ["sub/notes.txt", "train.csv"]
    assert (version.task_run, version.pipeline_run, version.message) == (task, run, "from a task")
    usage = DatasetUsage.objects.get(version=version)
    assert (usage.direction, usage.task_run, usage.pipeline_run) == ("write", task, run)


def test_publish_explains_a_missing_dataset(world, live_asgi, tmp_path):
    _token, raw = create_token(world.alice, name="cli")
    (tmp_path / "f.txt").write_text("x")
    env = {**os.environ, "PORTAL_API_URL": live_asgi.url, "PORTAL_API_TOKEN": raw, "PORTAL_PROJECT": "project-a"}
    result = subprocess.run(
        [sys.executable, "-m", "apps.datasets.publish", "nope", str(tmp_path)],
        env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no dataset “nope” in project “project-a” (use --create)" in result.stderr
