"""A metrics-only call (`log_metric`, and `log_batch` with a few metrics: the client's `log_metrics`) is one SQL
statement on PostgreSQL: the run's lookup and both inserts in one data-modifying CTE
(`metrics.insert_points_by_run_uuid`). Whatever that statement cannot store (no such run, another tenant's, a
viewer's or read-only token, a deleted run, a bad value) goes the ordinary way, which answers as before and
writes nothing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.models.models import LatestMetric, Metric
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, make_token
from tests.models.conftest import MlflowApi, assert_error

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the one-statement path is PostgreSQL's")


def metric(run_id: str, value, step: int = 0, timestamp: int = 1, key: str = "loss") -> dict:
    return {"run_id": run_id, "key": key, "value": value, "timestamp": timestamp, "step": step}


def statements(api: MlflowApi, endpoint: str, body: dict) -> list[str]:
    api.get("experiments/get", experiment_id="0")  # the token's caller is cached after a first call: count the rest
    with CaptureQueriesContext(connection) as ctx:
        response = api.post(endpoint, body)
    assert response.status_code == 200, response.content
    return [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]


def stored(run_id: str) -> list[tuple]:
    return sorted(Metric.objects.filter(run__run_uuid=run_id).values_list("key", "step", "value", "is_nan"))


def latest(run_id: str) -> dict[str, tuple]:
    return {
        row[0]: row[1:]
        for row in LatestMetric.objects.filter(run__run_uuid=run_id).values_list("key", "step", "value", "is_nan")
    }


def test_log_metric_is_one_statement_that_stores_the_point_and_the_latest_value(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    sql = statements(api_a, "runs/log-metric", metric(run_id, 0.5, step=3))
    assert len(sql) == 1
    assert sql[0].startswith("WITH r AS")
    assert stored(run_id) == [("loss", 3, 0.5, False)]
    assert latest(run_id) == {"loss": (3, 0.5, False)}


def test_log_metrics_through_log_batch_is_one_statement(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    body = {"run_id": run_id, "metrics": [metric(run_id, 1, key="a"), metric(run_id, float("nan"), key="b")]}
    body["metrics"][1]["value"] = "NaN"
    assert len(statements(api_a, "runs/log-batch", body)) == 1
    assert stored(run_id) == [("a", 0, 1.0, False), ("b", 0, 0.0, True)]
    assert latest(run_id) == {"a": (0, 1.0, False), "b": (0, 0.0, True)}


def test_a_batch_with_params_or_tags_takes_the_ordinary_transaction(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    body = {"run_id": run_id, "metrics": [metric(run_id, 1)], "params": [{"key": "lr", "value": "0.1"}]}
    assert len(statements(api_a, "runs/log-batch", body)) > 1
    assert stored(run_id) == [("loss", 0, 1.0, False)]


def test_the_latest_value_only_moves_forward_and_a_retry_stores_nothing_twice(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    for step, value in ((5, 0.2), (3, 0.9), (5, 0.2)):  # an older step, then a retry of the first call
        assert api_a.post("runs/log-metric", metric(run_id, value, step=step)).status_code == 200
    assert stored(run_id) == [("loss", 3, 0.9, False), ("loss", 5, 0.2, False)]
    assert latest(run_id) == {"loss": (5, 0.2, False)}


def test_refusals_answer_as_the_ordinary_path_and_write_nothing(world, api_a, api_b):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    viewer = UserFactory(username="viewer")
    add_member(world.project_a, viewer, Role.VIEWER)
    as_viewer = MlflowApi(make_token(viewer, project=world.project_a))
    read_only = MlflowApi(make_token(world.alice, project=world.project_a, scope="read"))

    assert_error(api_b.post("runs/log-metric", metric(run_id, 1)), 404, "RESOURCE_DOES_NOT_EXIST")
    assert_error(as_viewer.post("runs/log-metric", metric(run_id, 1)), 403, "PERMISSION_DENIED")
    assert_error(read_only.post("runs/log-metric", metric(run_id, 1)), 403, "PERMISSION_DENIED")
    missing = "0" * 32
    assert_error(api_a.post("runs/log-metric", metric(missing, "x")), 404, "RESOURCE_DOES_NOT_EXIST")  # run first
    assert_error(api_a.post("runs/log-metric", metric(run_id, "x")), 400, "INVALID_PARAMETER_VALUE")
    assert_error(
        api_b.post("runs/log-batch", {"run_id": run_id, "metrics": [metric(run_id, 1)]}), 404, "RESOURCE_DOES_NOT_EXIST"
    )
    assert api_a.post("runs/delete", {"run_id": run_id}).status_code == 200
    body = assert_error(api_a.post("runs/log-metric", metric(run_id, 1)), 400, "INVALID_PARAMETER_VALUE")
    assert "must be in the 'active' state" in body["message"]
    assert stored(run_id) == []
    assert latest(run_id) == {}
