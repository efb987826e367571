"""The runs table's column chooser offers the keys the experiment's active runs logged, whatever path logged them,
at a cost that does not grow with the runs."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.models.metrics import make_point
from apps.models.models import ExperimentKey, Param, RunTag
from apps.models.services import delete_tag, log_batch, set_run_lifecycle
from apps.models.views.experiments import experiment_keys
from tests.factories import tracking_run


def logged(run, *, metric: str = "", param: str = "", tag: str = "") -> None:
    log_batch(
        run,
        metrics=[make_point(metric, 1.0, 1_700_000_000_000, 0)] if metric else [],
        params=[(param, "1")] if param else [],
        tags=[(tag, "x")] if tag else [],
    )


def test_it_offers_the_keys_logged_through_the_service(world):
    run = tracking_run(world.project_a, world.alice, name="a", experiment_name="iris")
    logged(run, metric="accuracy", param="depth", tag="team")
    logged(run, metric="loss")
    assert experiment_keys(run.experiment) == {"metric": ["accuracy", "loss"], "param": ["depth"], "tag": ["team"]}


def test_it_records_keys_written_in_bulk_outside_the_services(world):
    """The HPO driver and the metric store write with bulk_create and raw SQL: the triggers see those too."""
    run = tracking_run(world.project_a, world.alice, experiment_name="iris")
    Param.objects.bulk_create([Param(run=run, key="trial.lr", value="0.1")], ignore_conflicts=True)
    RunTag.objects.bulk_create(
        [RunTag(run=run, key="hpo.study", value="s")], update_conflicts=True, unique_fields=["run", "key"],
        update_fields=["value"],
    )  # fmt: skip
    keys = experiment_keys(run.experiment)
    assert keys["param"] == ["trial.lr"]
    assert keys["tag"] == ["hpo.study"]


def test_it_leaves_out_system_tags_and_other_experiments_keys(world):
    run = tracking_run(world.project_a, world.alice, experiment_name="iris")  # carries mlflow.runName
    other = tracking_run(world.project_a, world.alice, experiment_name="other")
    logged(other, metric="f1", param="seed", tag="owner")
    assert experiment_keys(run.experiment) == {"metric": [], "param": [], "tag": []}
    assert ExperimentKey.objects.filter(experiment=run.experiment, key="mlflow.runName").exists()


def test_a_key_only_deleted_runs_or_dropped_tags_had_is_no_longer_offered(world):
    kept = tracking_run(world.project_a, world.alice, name="kept", experiment_name="iris")
    gone = tracking_run(world.project_a, world.alice, name="gone", experiment_name="iris")
    logged(kept, metric="accuracy", tag="team")
    logged(gone, metric="accuracy", param="only-gone", tag="team")
    logged(gone, metric="only-gone")
    set_run_lifecycle(gone, "deleted")
    delete_tag(kept, "team")
    assert experiment_keys(kept.experiment) == {"metric": ["accuracy"], "param": [], "tag": []}
    set_run_lifecycle(gone, "active")  # restored: its keys come back
    assert experiment_keys(kept.experiment) == {
        "metric": ["accuracy", "only-gone"], "param": ["only-gone"], "tag": ["team"]
    }  # fmt: skip


@pytest.mark.parametrize("runs", [2, 20])
def test_key_discovery_costs_three_statements_whatever_the_runs(world, runs):
    first = tracking_run(world.project_a, world.alice, name="r0", experiment_name="iris")
    for index in range(1, runs):
        logged(tracking_run(world.project_a, world.alice, name=f"r{index}", experiment_name="iris"), param="p")
    with CaptureQueriesContext(connection) as queries:
        experiment_keys(first.experiment)
    assert len(queries) == 3
