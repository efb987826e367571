"""32 writers logging to one run at once lose no metric point, and the latest value comes out right."""

from __future__ import annotations

import http.client
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from apps.models import services
from apps.models.metrics import make_point
from apps.models.models import Experiment, LatestMetric, Metric, Run
from tests.factories import make_token

WRITERS = 32
BATCHES = 5
POINTS = 20


def _expected_latest() -> tuple[int, float]:
    # writer w logs steps w*1000 + b*POINTS + i; the highest step wins
    return (WRITERS - 1) * 1000 + (BATCHES - 1) * POINTS + POINTS - 1, float(WRITERS - 1)


@pytest.mark.live
def test_32_concurrent_http_writers_lose_no_point(world, live_asgi):
    token = make_token(world.alice, project=world.project_a)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    experiment = services.create_experiment(world.project_a, "concurrent")
    run = services.create_run(experiment, user=world.alice)
    barrier = threading.Barrier(WRITERS)

    def writer(w: int) -> list[int]:
        conn = http.client.HTTPConnection(live_asgi.host, live_asgi.port, timeout=60)
        statuses = []
        barrier.wait()
        for b in range(BATCHES):
            metrics = [
                {"key": key, "value": float(w), "timestamp": 1000 + b, "step": w * 1000 + b * POINTS + i}
                for i in range(POINTS)
                for key in ("loss", "acc")
            ]
            conn.request(
                "POST",
                "/api/2.0/mlflow/runs/log-batch",
                json.dumps({"run_id": run.run_uuid, "metrics": metrics}),
                headers,
            )
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        conn.close()
        return statuses

    with ThreadPoolExecutor(WRITERS) as pool:
        statuses = [s for result in pool.map(writer, range(WRITERS)) for s in result]
    assert statuses == [200] * WRITERS * BATCHES
    assert Metric.objects.filter(run=run).count() == WRITERS * BATCHES * POINTS * 2
    for key in ("loss", "acc"):
        assert Metric.objects.filter(run=run, key=key).values("step").distinct().count() == WRITERS * BATCHES * POINTS
        latest = LatestMetric.objects.get(run=run, key=key)
        assert (latest.step, latest.value) == _expected_latest()


def test_32_concurrent_service_writers_keep_latest_right(transactional_db, world):
    """Writers straight on the database (each thread its own connection): the upsert, not the web server,
    has to serialise them. Every writer also logs one point at a shared step with its own timestamp."""
    experiment = Experiment.objects.create(project=world.project_a, name="threads")
    run = services.create_run(experiment, user=world.alice)
    barrier = threading.Barrier(WRITERS)
    errors = []

    def writer(w: int) -> None:
        try:
            barrier.wait()
            fresh = Run.objects.get(pk=run.pk)
            for b in range(BATCHES):
                points = [make_point("m", float(w), 5000 + w, w * 1000 + b * POINTS + i) for i in range(POINTS)]
                points.append(make_point("shared", float(w), 10_000 + w, 7))
                services.log_batch(fresh, metrics=points)
        except Exception as exc:  # reported below: an exception in a thread would be lost
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Metric.objects.filter(run=run, key="m").count() == WRITERS * BATCHES * POINTS
    # a writer logs the same shared point in each batch: stored once per writer (a point is unique)
    assert Metric.objects.filter(run=run, key="shared").count() == WRITERS
    latest = LatestMetric.objects.get(run=run, key="m")
    assert (latest.step, latest.value) == _expected_latest()
    shared = LatestMetric.objects.get(run=run, key="shared")
    assert (shared.step, shared.timestamp, shared.value) == (7, 10_000 + WRITERS - 1, float(WRITERS - 1))
