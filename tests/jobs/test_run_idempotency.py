"""`Idempotency-Key` on the endpoints that start runs: a retry returns the run the first request started."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.jobs.models import PipelineRun, RunStatus
from apps.outbox.models import PendingTask
from tests.conftest import user_client
from tests.factories import pipeline

pytestmark = pytest.mark.django_db


def one_step(project, owner, name: str = "pipe"):
    return pipeline(project, owner, [{"name": "a", "args": {"code": "1"}}], name=name)


def start(client, pipe, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(f"/api/v1/pipelines/{pipe.pk}/run/", **headers)


def test_a_retry_with_the_same_key_gets_the_same_run_and_queues_nothing_more(world):
    pipe = one_step(world.project_a, world.alice)
    client = user_client(world.alice)

    first = start(client, pipe, "7f8e0a52-4f7b-4e2a-9c0e-1d2f3a4b5c6d")
    again = start(client, pipe, "7f8e0a52-4f7b-4e2a-9c0e-1d2f3a4b5c6d")

    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert PipelineRun.objects.count() == 1
    assert PendingTask.objects.filter(name="apps.jobs.tasks.advance_run").count() == 1


def test_without_a_key_each_request_starts_a_run(world):
    pipe = one_step(world.project_a, world.alice)
    client = user_client(world.alice)
    assert [start(client, pipe).status_code for _ in range(2)] == [201, 201]
    assert PipelineRun.objects.count() == 2


def test_the_key_of_another_request_is_refused_and_starts_nothing(world):
    pipe = one_step(world.project_a, world.alice)
    other = one_step(world.project_a, world.alice, name="other")
    client = user_client(world.alice)
    assert start(client, pipe, "k1").status_code == 201

    reused = start(client, other, "k1")

    assert reused.status_code == 422
    assert "Idempotency-Key" in reused.json()["detail"]
    assert PipelineRun.objects.count() == 1


def test_keys_belong_to_their_user(world):
    pipe = one_step(world.project_a, world.alice)
    alices = start(user_client(world.alice), pipe, "k1")
    bobs = start(user_client(world.bob), pipe, "k1")
    assert (alices.status_code, bobs.status_code) == (201, 201)
    assert alices.json()["id"] != bobs.json()["id"]


@pytest.mark.parametrize("key", ["", "x" * 256, "clé", "a b"])
def test_a_malformed_key_is_a_400_naming_the_header(world, key):
    pipe = one_step(world.project_a, world.alice)
    response = start(user_client(world.alice), pipe, key)
    assert response.status_code == 400
    assert list(response.json()) == ["Idempotency-Key"]
    assert not PipelineRun.objects.exists()


def test_rerun_and_retry_take_a_key_too_and_their_bodies_count(world):
    nodes = [{"name": "a", "args": {"code": "1"}}, {"name": "b", "depends_on": ["a"], "args": {"code": "2"}}]
    pipe = pipeline(world.project_a, world.alice, nodes)
    client = user_client(world.alice)
    run = PipelineRun.objects.get(pk=start(client, pipe).json()["id"])
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    url = f"/api/v1/runs/{run.pk}/"

    first = client.post(f"{url}rerun/", {"node": "b"}, format="json", HTTP_IDEMPOTENCY_KEY="r1")
    again = client.post(f"{url}rerun/", {"node": "b"}, format="json", HTTP_IDEMPOTENCY_KEY="r1")
    other_node = client.post(f"{url}rerun/", {"node": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="r1")
    as_retry = client.post(f"{url}retry/", HTTP_IDEMPOTENCY_KEY="r1")
    retried = client.post(f"{url}retry/", HTTP_IDEMPOTENCY_KEY="r2")
    retried_again = client.post(f"{url}retry/", HTTP_IDEMPOTENCY_KEY="r2")

    assert (first.status_code, again.status_code, other_node.status_code) == (201, 200, 422)
    assert again.json()["id"] == first.json()["id"]
    assert as_retry.status_code == 422
    assert (retried.status_code, retried_again.status_code) == (201, 200)
    assert retried_again.json()["id"] == retried.json()["id"]
    assert PipelineRun.objects.count() == 3  # the first run, one re-run, one retry


@pytest.mark.django_db(transaction=True)
def test_two_requests_with_one_key_at_once_make_one_run(world):
    pipe = one_step(world.project_a, world.alice)
    barrier = threading.Barrier(2)
    answers = []

    def request() -> None:
        try:
            client = user_client(world.alice)
            barrier.wait()
            answers.append(start(client, pipe, "same"))
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(a.status_code for a in answers) == [200, 201]
    assert answers[0].json()["id"] == answers[1].json()["id"]
    assert PipelineRun.objects.count() == 1
    assert not PendingTask.objects.exists()  # the winner's advance was sent; the loser's went with its rolled-back run
