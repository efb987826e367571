"""A write that committed answers as it would with the broker up, and its work is done once the broker is back.

The broker is really unreachable (this process's Celery points at a port nothing listens on); "back" is a broker of
the test's own with a real worker on it, which drains the outbox as beat makes it do in production.
"""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from apps.datasets.models import AnalysisStatus, DatasetVersion
from apps.jobs.models import PipelineRun, TaskRun
from apps.outbox.models import PendingTask
from apps.outbox.tasks import drain
from tests.conftest import user_client
from tests.datasets.helpers import upload_version
from tests.factories import dataset, pipeline
from tests.outbox.conftest import broker_down, wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

CSV = b"sepal,petal,species\n5.1,1.4,setosa\n7.0,4.7,versicolor\n"


@pytest.fixture(autouse=True)
def folders(settings, tmp_path):
    """Blobs where the worker process finds them too (it reads MEDIA_ROOT from its environment)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.STORAGES = {
        **django_settings.STORAGES,
        "datasets": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "media" / "datasets"},
        },
    }
    settings.DATASETS_UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTAL_WORK_DIR = tmp_path / "work"


def test_a_run_started_while_the_broker_is_down_answers_201_and_runs_once_it_is_back(
    world, private_broker, start_worker
):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])
    client = user_client(world.alice)
    url = f"/api/v1/pipelines/{pipe.pk}/run/"

    with broker_down():
        started = client.post(url, HTTP_IDEMPOTENCY_KEY="start-1")
        retried = client.post(url, HTTP_IDEMPOTENCY_KEY="start-1")  # the client did not trust the first answer

    assert started.status_code == 201, started.content
    assert retried.status_code == 200, retried.content
    assert retried.json()["id"] == started.json()["id"]
    run = PipelineRun.objects.get()
    assert run.status == "queued"
    assert not TaskRun.objects.exists()
    pending = PendingTask.objects.get()
    assert (pending.name, pending.args, pending.attempts) == ("apps.jobs.tasks.advance_run", [run.pk], 1)
    assert "refused" in pending.last_error.lower()

    worker = start_worker(private_broker)
    with private_broker.up():
        drain.delay()  # what beat sends every few seconds
    wait_for(lambda: TaskRun.objects.filter(run=run).exists(), worker, "the run was not advanced")
    wait_for(lambda: not PendingTask.objects.exists(), worker, "the outbox was not emptied")

    assert PipelineRun.objects.count() == 1
    assert list(TaskRun.objects.filter(run=run).values_list("node", "attempt")) == [("a", 1)]


def test_a_dataset_committed_while_the_broker_is_down_is_analysed_once_it_is_back(world, private_broker, start_worker):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)

    with broker_down():
        committed = upload_version(client, world.project_a, ds, {"iris.csv": CSV}, chunk=1024)  # asserts the 201

    version = DatasetVersion.objects.get(pk=committed["id"])
    assert version.analysis_status == AnalysisStatus.PENDING
    assert PendingTask.objects.get().args == [version.pk]

    worker = start_worker(private_broker)
    with private_broker.up():
        drain.delay()
    wait_for(
        lambda: DatasetVersion.objects.get(pk=version.pk).analysis_status == AnalysisStatus.READY,
        worker,
        "the version was not analysed",
    )
    version.refresh_from_db()
    assert [column["name"] for column in version.schema["iris.csv"]] == ["sepal", "petal", "species"]
    wait_for(lambda: not PendingTask.objects.exists(), worker, "the outbox was not emptied")
