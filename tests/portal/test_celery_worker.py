"""A real Celery worker process takes a task from the configured broker (Redis, or the folder broker)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token
from apps.accounts.tasks import purge_expired_tokens
from portal.celery import worker_command
from tests.conftest import database_url_of_test_db
from tests.factories import UserFactory

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queue() -> str:
    """A queue of our own: a developer's running worker or another CI job must not take our task."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def worker(queue):
    env = {**os.environ, "DATABASE_URL": database_url_of_test_db(), "PORTAL_VAR_DIR": str(settings.VAR_DIR)}
    proc = subprocess.Popen(
        worker_command(pool="solo", queues=[queue]),
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_a_worker_runs_a_task_sent_through_the_broker(worker, queue):
    user = UserFactory(username="alice")
    old, _raw = create_token(user, name="old")
    ApiToken.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(days=60))
    current, _raw = create_token(user, name="current")

    purge_expired_tokens.apply_async(queue=queue)

    deadline = time.monotonic() + 30
    while ApiToken.objects.filter(pk=old.pk).exists():
        assert worker.poll() is None, worker.stdout.read()
        assert time.monotonic() < deadline, "the worker did not run the task within 30 s"
        time.sleep(0.2)
    assert ApiToken.objects.filter(pk=current.pk).exists()


@pytest.mark.skipif(bool(settings.REDIS_URL), reason="the folder broker is the embedded default's")
def test_a_worker_survives_an_unreadable_message_file(worker, queue):
    """kombu#1551: a half-written message file ended the worker with JSONDecodeError (issue 17.22)."""
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    (folder / f"0_cut.{queue}.msg").write_bytes(b'{"body": ')  # sorts first: the worker reads it before the task
    user = UserFactory(username="alice")
    old, _raw = create_token(user, name="old")
    ApiToken.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(days=60))

    purge_expired_tokens.apply_async(queue=queue)

    deadline = time.monotonic() + 30
    while ApiToken.objects.filter(pk=old.pk).exists():
        assert worker.poll() is None, worker.stdout.read()
        assert time.monotonic() < deadline, "the worker did not run the task within 30 s"
        time.sleep(0.2)
    assert worker.poll() is None
    assert (folder / ".corrupt" / f"0_cut.{queue}.msg").exists()
