"""runs/log-batch, log-metric, log-parameter and set-tag: MLflow's limits, validations and error codes."""

from __future__ import annotations

import json

import pytest

from apps.models.models import LatestMetric, Metric, Param, RunTag
from tests.models.conftest import assert_error


@pytest.fixture
def run(api_a) -> dict:
    return api_a.run(api_a.experiment("batch"))


def batch(run_id: str, metrics=(), params=(), tags=()) -> dict:
    return {"run_id": run_id, "metrics": list(metrics), "params": list(params), "tags": list(tags)}


def metric(key: str, value, step: int = 0, timestamp: int = 1000) -> dict:
    return {"key": key, "value": value, "timestamp": timestamp, "step": step}


@pytest.mark.smoke
def test_a_batch_stores_metrics_params_and_tags(api_a, run):
    run_id = run["info"]["run_id"]
    body = batch(
        run_id,
        metrics=[metric("loss", 1.0 / (s + 1), step=s) for s in range(100)],
        params=[{"key": "lr", "value": "0.1"}],
        tags=[{"key": "team", "value": "vision"}],
    )
    response = api_a.post("runs/log-batch", body)
    assert response.status_code == 200, response.content
    assert response.json() == {}
    assert Metric.objects.filter(run__run_uuid=run_id, key="loss").count() == 100
    latest = LatestMetric.objects.get(run__run_uuid=run_id, key="loss")
    assert (latest.step, latest.value) == (99, pytest.approx(0.01))
    assert Param.objects.get(run__run_uuid=run_id, key="lr").value == "0.1"
    assert RunTag.objects.get(run__run_uuid=run_id, key="team").value == "vision"


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("metrics", "params", "tags", "word"),
    [
        (1001, 0, 0, "1000 metrics"),
        (0, 101, 0, "100 params"),
        (0, 0, 101, "100 tags"),
        (950, 30, 30, "1000 metrics, params, and tags"),
    ],
)
def test_it_rejects_oversize_batches(api_a, run, metrics, params, tags, word):
    run_id = run["info"]["run_id"]
    body = batch(
        run_id,
        metrics=[metric("m", i, step=i) for i in range(metrics)],
        params=[{"key": f"p{i}", "value": "v"} for i in range(params)],
        tags=[{"key": f"t{i}", "value": "v"} for i in range(tags)],
    )
    error = assert_error(api_a.post("runs/log-batch", body), 400, "INVALID_PARAMETER_VALUE")
    assert f"at most {word}" in error["message"]
    assert not Metric.objects.exists()


def test_it_rejects_a_body_over_one_megabyte(api_a, run):
    body = batch(run["info"]["run_id"], tags=[{"key": "big", "value": "x" * 1_000_001}])
    error = assert_error(api_a.post("runs/log-batch", body), 400, "INVALID_PARAMETER_VALUE")
    assert "at most 1000000 bytes" in error["message"]


@pytest.mark.smoke
def test_a_param_cannot_change_its_value(api_a, run):
    run_id = run["info"]["run_id"]
    assert api_a.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"}).status_code == 200
    # the same value again is fine
    assert api_a.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"}).status_code == 200
    error = assert_error(
        api_a.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.2"}),
        400,
        "INVALID_PARAMETER_VALUE",
    )
    assert "Changing param values is not allowed" in error["message"]
    # nothing of a failing batch is stored
    body = batch(run_id, metrics=[metric("m", 1)], params=[{"key": "lr", "value": "0.3"}])
    assert_error(api_a.post("runs/log-batch", body), 400, "INVALID_PARAMETER_VALUE")
    assert not Metric.objects.filter(key="m").exists()
    assert Param.objects.get(key="lr").value == "0.1"


def test_duplicate_param_keys_in_one_batch_are_rejected(api_a, run):
    body = batch(run["info"]["run_id"], params=[{"key": "a", "value": "1"}, {"key": "a", "value": "2"}])
    error = assert_error(api_a.post("runs/log-batch", body), 400, "INVALID_PARAMETER_VALUE")
    assert "Duplicate parameter keys" in error["message"]


@pytest.mark.smoke
def test_an_unknown_run_is_resource_does_not_exist(api_a):
    error = assert_error(
        api_a.post("runs/log-metric", {"run_id": "0" * 32, **metric("m", 1)}), 404, "RESOURCE_DOES_NOT_EXIST"
    )
    assert "0" * 32 in error["message"]
    assert_error(api_a.get("runs/get", run_id="f" * 32), 404, "RESOURCE_DOES_NOT_EXIST")


@pytest.mark.parametrize(
    "body",
    [
        {"key": "m", "value": "abc", "timestamp": 1},
        {"key": "m", "value": None, "timestamp": 1},
        {"key": "m", "value": 1, "timestamp": "soon"},
        {"key": "m", "value": 1, "timestamp": 1, "step": 1.5},
        {"key": "../etc", "value": 1, "timestamp": 1},
        {"key": "bad*name", "value": 1, "timestamp": 1},
        {"key": "", "value": 1, "timestamp": 1},
        {"key": "k" * 251, "value": 1, "timestamp": 1},
        {"key": ["list"], "value": 1, "timestamp": 1},
    ],
)
def test_bad_metrics_are_invalid_parameter_value(api_a, run, body):
    response = api_a.post("runs/log-metric", {"run_id": run["info"]["run_id"], **body})
    assert_error(response, 400, "INVALID_PARAMETER_VALUE")


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"run_id": 5}', '{"run_id": "x", "metrics": "nope"}'])
def test_malformed_bodies_never_cause_a_500(api_a, run, body):
    response = api_a.post("runs/log-batch", body)
    assert response.status_code in (400, 404), response.content
    assert set(response.json()) == {"error_code", "message"}


def test_nan_and_infinities_round_trip(api_a, run):
    run_id = run["info"]["run_id"]
    body = batch(
        run_id,
        metrics=[metric("n", "NaN", step=0), metric("n", "Infinity", step=1), metric("n", "-Infinity", step=2)],
    )
    assert api_a.post("runs/log-batch", body).status_code == 200
    history = api_a.get("metrics/get-history", run_id=run_id, metric_key="n").json()["metrics"]
    assert [m["value"] for m in history] == ["NaN", "Infinity", "-Infinity"]
    data = api_a.get("runs/get", run_id=run_id).json()["run"]["data"]
    assert data["metrics"] == [{"key": "n", "value": "-Infinity", "timestamp": 1000, "step": 2}]


def test_latest_is_highest_step_then_timestamp_then_value(api_a, run):
    run_id = run["info"]["run_id"]
    points = [
        metric("m", 5, step=3, timestamp=10),
        metric("m", 1, step=3, timestamp=20),
        metric("m", 9, step=1, timestamp=99),
    ]
    for point in points:  # one request each: the upsert decides, not the batch
        assert api_a.post("runs/log-metric", {"run_id": run_id, **point}).status_code == 200
    assert api_a.post("runs/log-metric", {"run_id": run_id, **metric("m", 2, step=3, timestamp=20)}).status_code == 200
    latest = LatestMetric.objects.get(key="m")
    assert (latest.step, latest.timestamp, latest.value) == (3, 20, 2)
    assert Metric.objects.filter(key="m").count() == 4


def test_logging_to_a_deleted_run_is_rejected(api_a, run):
    run_id = run["info"]["run_id"]
    assert api_a.post("runs/delete", {"run_id": run_id}).status_code == 200
    error = assert_error(
        api_a.post("runs/log-metric", {"run_id": run_id, **metric("m", 1)}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "must be in the 'active' state" in error["message"]
    assert api_a.post("runs/restore", {"run_id": run_id}).status_code == 200
    assert api_a.post("runs/log-metric", {"run_id": run_id, **metric("m", 1)}).status_code == 200


def test_set_tag_of_run_name_renames_the_run(api_a, run):
    run_id = run["info"]["run_id"]
    assert (
        api_a.post("runs/set-tag", {"run_id": run_id, "key": "mlflow.runName", "value": "renamed"}).status_code == 200
    )
    assert api_a.get("runs/get", run_id=run_id).json()["run"]["info"]["run_name"] == "renamed"
    assert api_a.post("runs/delete-tag", {"run_id": run_id, "key": "nope"}).status_code == 404


def test_log_inputs_records_datasets(api_a, run):
    run_id = run["info"]["run_id"]
    dataset = {"name": "iris", "digest": "abc123", "source_type": "local", "source": json.dumps({"uri": "/x"})}
    body = {
        "run_id": run_id,
        "datasets": [{"tags": [{"key": "mlflow.data.context", "value": "train"}], "dataset": dataset}],
    }
    assert api_a.post("runs/log-inputs", body).status_code == 200
    inputs = api_a.get("runs/get", run_id=run_id).json()["run"]["inputs"]["dataset_inputs"]
    assert inputs == [{"tags": [{"key": "mlflow.data.context", "value": "train"}], "dataset": dataset}]
