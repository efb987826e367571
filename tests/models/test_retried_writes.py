"""Retried writes do not duplicate: a metric point is (key, timestamp, step, value) as MLflow's primary key has
it, so the same point logged again is stored once; a param or tag logged again with the same value is a no-op.

The official client 3.x re-sends the run's metrics when it logs a model, and any HTTP retry re-sends a batch.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from apps.models import services
from apps.models.metrics import insert_points, make_point
from apps.models.models import Experiment, LatestMetric, Metric, Param, RunTag
from tests.models.conftest import assert_error


@pytest.fixture
def run(api_a) -> dict:
    return api_a.run(api_a.experiment("retries"))


def point(key: str, value, step: int = 0, timestamp: int = 1000) -> dict:
    return {"key": key, "value": value, "timestamp": timestamp, "step": step}


def history(api, run_id: str, key: str) -> list[tuple]:
    response = api.get("metrics/get-history", run_id=run_id, metric_key=key)
    assert response.status_code == 200, response.content
    return [(m["step"], m["timestamp"], m["value"]) for m in response.json()["metrics"]]


@pytest.mark.smoke
def test_the_same_point_logged_twice_is_stored_once(api_a, run):
    run_id = run["info"]["run_id"]
    for _attempt in range(2):
        response = api_a.post("runs/log-metric", {"run_id": run_id, **point("loss", 0.5, step=0)})
        assert response.status_code == 200, response.content
    assert history(api_a, run_id, "loss") == [(0, 1000, 0.5)]
    assert Metric.objects.filter(run__run_uuid=run_id, key="loss").count() == 1


def test_a_retried_batch_and_points_repeated_inside_it_are_stored_once(api_a, run):
    """120 steps, then what the client sends when it logs a model: the last point again; then the whole batch
    retried. History keeps 120 points."""
    run_id = run["info"]["run_id"]
    steps = [point("acc", s / 100, step=s, timestamp=1000 + s) for s in range(120)]
    body = {"run_id": run_id, "metrics": [*steps[:60], steps[0], steps[59]]}
    for _attempt in range(2):
        assert api_a.post("runs/log-batch", body).status_code == 200
    assert api_a.post("runs/log-batch", {"run_id": run_id, "metrics": steps[60:]}).status_code == 200
    assert api_a.post("runs/log-metric", {"run_id": run_id, **steps[-1]}).status_code == 200
    assert history(api_a, run_id, "acc") == [(s, 1000 + s, s / 100) for s in range(120)]
    latest = LatestMetric.objects.get(run__run_uuid=run_id, key="acc")
    assert (latest.step, latest.value) == (119, 1.19)


def test_points_that_differ_in_value_timestamp_or_step_are_all_kept(api_a, run):
    run_id = run["info"]["run_id"]
    body = {
        "run_id": run_id,
        "metrics": [
            point("m", 1.0),
            point("m", 2.0),  # same step and time, another value
            point("m", 1.0, timestamp=2000),
            point("m", 1.0, step=1),
            point("m", "NaN"),
            point("m", "NaN"),  # NaN is one value (stored 0 + is_nan, as MLflow does)
            point("m", 0.0),  # not the same point as NaN
            point("m", "Infinity"),
            point("m", "Infinity"),
        ],
    }
    for _attempt in range(2):
        assert api_a.post("runs/log-batch", body).status_code == 200
    assert sorted(history(api_a, run_id, "m"), key=str) == sorted(
        [(0, 1000, 1.0), (0, 1000, 2.0), (0, 2000, 1.0), (1, 1000, 1.0), (0, 1000, "NaN"), (0, 1000, 0.0),
         (0, 1000, "Infinity")],
        key=str,
    )  # fmt: skip


def test_params_and_tags_logged_again_with_the_same_value_are_accepted(api_a, run):
    run_id = run["info"]["run_id"]
    for _attempt in range(2):
        assert api_a.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"}).status_code == 200
        assert api_a.post("runs/set-tag", {"run_id": run_id, "key": "team", "value": "cv"}).status_code == 200
        body = {
            "run_id": run_id,
            "metrics": [point("m", 1.0)],
            "params": [{"key": "lr", "value": "0.1"}, {"key": "depth", "value": "3"}],
            "tags": [{"key": "team", "value": "cv"}],
        }
        assert api_a.post("runs/log-batch", body).status_code == 200
    assert dict(Param.objects.filter(run__run_uuid=run_id).values_list("key", "value")) == {"lr": "0.1", "depth": "3"}
    assert list(RunTag.objects.filter(run__run_uuid=run_id, key="team").values_list("value", flat=True)) == ["cv"]
    assert Metric.objects.filter(run__run_uuid=run_id).count() == 1
    # another value of a param is still refused, and nothing of that batch is stored
    body = {"run_id": run_id, "metrics": [point("m2", 1.0)], "params": [{"key": "lr", "value": "0.2"}]}
    assert_error(api_a.post("runs/log-batch", body), 400, "INVALID_PARAMETER_VALUE")
    assert not Metric.objects.filter(run__run_uuid=run_id, key="m2").exists()


def test_the_service_skips_points_already_stored(world):
    experiment = Experiment.objects.create(project=world.project_a, name="svc")
    run = services.create_run(experiment, user=world.alice)
    points = [make_point("x", float(s), 5, s) for s in range(5)]
    with transaction.atomic():
        insert_points(run.pk, points)
    with transaction.atomic():
        insert_points(run.pk, [*points, make_point("x", 9.0, 5, 9)])
    assert list(Metric.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [0, 1, 2, 3, 4, 9]


def test_the_migration_removes_duplicates_stored_before_it(transactional_db, world):
    """Rows stored twice before points were unique: the migration keeps the first of each."""
    experiment = Experiment.objects.create(project=world.project_a, name="old")
    run = services.create_run(experiment, user=world.alice)
    executor = MigrationExecutor(connection)
    target = [("models", "0001_initial")]
    latest = executor.loader.graph.leaf_nodes()  # every app: going back unapplies what depends on it
    try:
        executor.migrate(target)
        table = Metric._meta.db_table
        other, nan = (run.pk, "k", 2.0, 5, 0, False), (run.pk, "k", 0.0, 5, 1, True)
        rows = [(run.pk, "k", 1.0, 5, 0, False)] * 3 + [other, nan] * 2
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} (run_id, key, value, timestamp, step, is_nan) VALUES (%s, %s, %s, %s, %s, %s)",
                rows,
            )
            cursor.execute(f"SELECT min(id) FROM {table}")
            first_id = cursor.fetchone()[0]
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    kept = list(Metric.objects.filter(run=run).order_by("id").values_list("id", "step", "value", "is_nan"))
    assert [(s, v, n) for _i, s, v, n in kept] == [(0, 1.0, False), (0, 2.0, False), (1, 0.0, True)]
    assert kept[0][0] == first_id
