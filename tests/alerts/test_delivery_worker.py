"""The wiring, once, with real parts: a Celery worker process takes a delivery from the broker and posts it to a
real HTTP receiver; a receiver that fails leaves the error on the row and the task scheduled again."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
from django.conf import settings

from apps.alerts import engine
from apps.alerts.kinds import Finding
from apps.alerts.models import Channel, Delivery
from apps.alerts.tasks import deliver
from portal.celery import worker_command
from tests.alerts.factories import channel as make_channel
from tests.alerts.factories import rule as make_rule
from tests.conftest import database_url_of_test_db

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queue() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def worker(queue):
    env = {**os.environ, "DATABASE_URL": database_url_of_test_db(), "PORTAL_VAR_DIR": str(settings.VAR_DIR),
           "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8"}  # fmt: skip  # its receiver listens on loopback
    proc = subprocess.Popen(
        worker_command(pool="solo", queues=[queue]), cwd=settings.BASE_DIR, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there in time"
        time.sleep(0.2)


def test_a_worker_sends_a_firing_alert_to_a_webhook(world, receiver, worker, queue):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.SLACK, url=f"{receiver.url}/services/x")
    rule = make_rule(world.project_a, world.alice, "run_failed", channels=[channel], name="fails")
    event = engine.fire(rule, Finding("pipeline:train", "pipeline train", "Run train #1 failed"))
    delivery = Delivery.objects.get(event=event)
    deliver.apply_async(args=[delivery.pk], queue=queue)
    wait_for(lambda: Delivery.objects.get(pk=delivery.pk).status == "sent")
    assert "Run train #1 failed" in receiver.requests[0].json()["text"]
    assert Delivery.objects.get(pk=delivery.pk).attempts == 1


def test_a_failing_receiver_is_recorded_and_tried_again(world, receiver, worker, queue):
    receiver.status = 503
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"{receiver.url}/hook")
    delivery = Delivery.objects.create(project=world.project_a, channel=channel, kind=Delivery.Kind.TEST)
    deliver.apply_async(args=[delivery.pk], queue=queue)
    wait_for(lambda: Delivery.objects.get(pk=delivery.pk).attempts == 1)
    delivery.refresh_from_db()
    assert delivery.status == "pending"
    assert delivery.error.startswith("HTTP 503")
