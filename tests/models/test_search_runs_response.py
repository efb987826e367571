"""runs/search's response: each run field for field as runs/get has it, in a number of queries that does not grow
with the page, and only runs of the caller's projects."""

from __future__ import annotations

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.models.conftest import api_for

DATASET = {"name": "iris", "digest": "abc123", "source_type": "local", "source": json.dumps({"uri": "/x"})}


def full_run(api, experiment_id: str, name: str, start_time: int) -> str:
    """A run with metrics (NaN and ±Infinity among them), params, tags, a dataset input and an end time."""
    run_id = api.run(experiment_id, run_name=name, start_time=start_time)["info"]["run_id"]
    metrics = [
        {"key": "acc", "value": 0.9478110340616258, "timestamp": 1700000000123, "step": 3},
        {"key": "big", "value": 1e300, "timestamp": 5, "step": 9007199254740993},
        {"key": "nan", "value": "NaN", "timestamp": 6, "step": 0},
        {"key": "up", "value": "Infinity", "timestamp": 7, "step": 0},
        {"key": "down", "value": "-Infinity", "timestamp": 8, "step": 0},
        {"key": "whole", "value": 2.0, "timestamp": 9, "step": -4},
    ]
    body = {
        "run_id": run_id,
        "metrics": metrics,
        "params": [{"key": "model", "value": "rf"}, {"key": "empty", "value": ""}],
        "tags": [{"key": "team", "value": 'vision ✓ "quoted" \\ </script>'}],
    }
    assert api.post("runs/log-batch", body).status_code == 200
    inputs = {
        "run_id": run_id,
        "datasets": [{"tags": [{"key": "mlflow.data.context", "value": "train"}], "dataset": DATASET}],
    }
    assert api.post("runs/log-inputs", inputs).status_code == 200
    assert api.post("runs/update", {"run_id": run_id, "status": "FINISHED", "end_time": 5000}).status_code == 200
    return run_id


def by_key(items: list[dict]) -> list[dict]:
    return sorted(items, key=lambda item: item["key"])


def test_a_searched_run_is_field_for_field_what_it_was(api_a, world):
    experiment_id = api_a.experiment("shape")
    run_id = full_run(api_a, experiment_id, "full", 1000)
    bare_id = api_a.run(experiment_id, run_name="bare", start_time=999)["info"]["run_id"]

    response = api_a.post("runs/search", {"experiment_ids": [experiment_id]})

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    found = response.json()
    assert list(found) == ["runs"]
    full, bare = found["runs"]
    assert list(full) == ["info", "data", "inputs"]
    assert list(full["info"]) == [
        "run_id", "run_uuid", "run_name", "experiment_id", "user_id", "status", "start_time", "artifact_uri",
        "lifecycle_stage", "end_time",
    ]  # fmt: skip
    assert full["info"] == {
        "run_id": run_id,
        "run_uuid": run_id,
        "run_name": "full",
        "experiment_id": experiment_id,
        "user_id": "alice",
        "status": "FINISHED",
        "start_time": 1000,
        "artifact_uri": full["info"]["artifact_uri"],
        "lifecycle_stage": "active",
        "end_time": 5000,
    }
    assert full["info"]["artifact_uri"].endswith(f"/{run_id}/artifacts")
    assert list(full["data"]) == ["metrics", "params", "tags"]
    assert by_key(full["data"]["metrics"]) == [
        {"key": "acc", "value": 0.9478110340616258, "timestamp": 1700000000123, "step": 3},
        {"key": "big", "value": 1e300, "timestamp": 5, "step": 9007199254740993},
        {"key": "down", "value": "-Infinity", "timestamp": 8, "step": 0},
        {"key": "nan", "value": "NaN", "timestamp": 6, "step": 0},
        {"key": "up", "value": "Infinity", "timestamp": 7, "step": 0},
        {"key": "whole", "value": 2.0, "timestamp": 9, "step": -4},
    ]
    assert by_key(full["data"]["params"]) == [{"key": "empty", "value": ""}, {"key": "model", "value": "rf"}]
    assert by_key(full["data"]["tags"]) == [
        {"key": "mlflow.runName", "value": "full"},
        {"key": "team", "value": 'vision ✓ "quoted" \\ </script>'},
    ]
    assert full["inputs"] == {
        "dataset_inputs": [{"tags": [{"key": "mlflow.data.context", "value": "train"}], "dataset": DATASET}]
    }
    assert "end_time" not in bare["info"]
    assert bare["data"] == {"metrics": [], "params": [], "tags": [{"key": "mlflow.runName", "value": "bare"}]}
    assert bare["inputs"] == {"dataset_inputs": []}
    for run in (full, bare):  # the same run as runs/get has it
        got = api_a.get("runs/get", run_id=run["info"]["run_id"]).json()["run"]
        assert got["info"] == run["info"]
        assert got["inputs"] == run["inputs"]
        assert {k: by_key(v) for k, v in got["data"].items()} == {k: by_key(v) for k, v in run["data"].items()}
    assert bare_id == bare["info"]["run_id"]


def test_the_number_of_queries_does_not_grow_with_the_page(api_a):
    experiment_id = api_a.experiment("count")
    counts = {}
    made = 0
    for size in (2, 12):
        while made < size:
            full_run(api_a, experiment_id, f"r{made}", 1000 + made)
            made += 1
        with CaptureQueriesContext(connection) as queries:
            response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "max_results": 100})
        assert len(response.json()["runs"]) == size
        # the search's own statements (the caller's grants are cached for a few seconds, so may or may not show)
        counts[size] = [
            q["sql"].split(" FROM ")[1].split()[0] for q in queries.captured_queries if "models_" in q["sql"]
        ]
    assert counts[2] == counts[12]
    assert len(counts[2]) == 6  # runs, latest metrics, params, tags, the ids of the inputs and the inputs


def test_runs_of_other_projects_stay_invisible(api_a, api_b, world):
    mine = api_a.experiment("mine")
    theirs = api_b.experiment("theirs")
    full_run(api_a, mine, "a-run", 1)
    full_run(api_b, theirs, "b-run", 2)

    found = api_a.post("runs/search", {"experiment_ids": [mine, theirs], "filter": "metrics.acc > 0"}).json()
    bob = api_for(world.bob).post("runs/search", {"experiment_ids": [mine, theirs]}).json()

    assert [r["info"]["run_name"] for r in found["runs"]] == ["a-run"]
    assert [r["info"]["run_name"] for r in bob["runs"]] == ["a-run"]
    assert api_b.post("runs/search", {"experiment_ids": [mine]}).json() == {"runs": []}
