"""A data monitor compares each new version of its dataset with the previous one: rows changed and per-feature drift
(the monitoring app's PSI); past its thresholds it starts the policy as the policy's owner, with the new version in
the pipeline's arguments, and announces the drift to the project's alert rules."""

from __future__ import annotations

import random

import pytest

from apps.alerts.models import AlertEvent
from apps.retraining import datachange
from apps.retraining.models import Retraining
from apps.retraining.services import check_version, create_monitor, start_policy
from apps.retraining.tasks import announce
from tests.alerts.factories import channel, rule
from tests.factories import dataset, dataset_version
from tests.retraining.factories import policy

pytestmark = pytest.mark.django_db


def iris_like(rows: int = 150, shift: float = 0.0, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    lines = ["sepal_length,sepal_width,species"]
    for i in range(rows):
        lines.append(f"{rng.gauss(5.8, 0.8) + shift:.2f},{rng.gauss(3.0, 0.4):.2f},{['a', 'b', 'c'][i % 3]}")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def watched(world):
    project, alice = world.project_a, world.alice
    ds = dataset(project, alice, name="iris")
    first = dataset_version(ds, {"iris.csv": iris_like()})
    rule_ = policy(project, alice, dataset=ds, arguments={"load": {"code": "print('{version} after {previous}')"}})
    monitor = create_monitor(project, alice, name="watch", dataset=ds, policy=rule_, min_changed_percent=50,
                             drift_threshold=0.2, target_column="species")  # fmt: skip
    return monitor, first


def test_changed_rows_count_modified_rows_once():
    old = [("1", "a"), ("2", "b"), ("3", "c"), ("4", "d")]
    assert datachange.changed_percent(old, old) == 0
    assert datachange.changed_percent(old, [("1", "a"), ("2", "b"), ("3", "x"), ("4", "d")]) == 25
    assert datachange.changed_percent(old, old + old) == 50  # four rows added to four
    assert datachange.changed_percent(old, [("9", "z")]) == 100


def test_a_shifted_feature_starts_the_policy_with_the_new_version(world, watched):
    monitor, first = watched
    # the same rows but for a shifted first feature: every row differs, and only that feature drifts
    second = dataset_version(monitor.dataset, {"iris.csv": iris_like(shift=2.0)})

    check = check_version(monitor, second)

    assert check.previous == first
    assert check.changed_percent == 100
    assert check.drifted == ["sepal_length"]
    assert check.features["sepal_length"]["psi"] > 1 > check.features["sepal_width"]["psi"]
    assert "species" not in check.features
    assert check.triggered
    retraining = Retraining.objects.get(policy=monitor.policy)
    assert (retraining.reason, retraining.dataset_version, retraining.status) == ("data", second, "running")
    run = retraining.run
    assert (run.trigger, run.created_by, run.pipeline) == ("retrain", world.alice, monitor.policy.pipeline)
    load = next(n for n in run.spec["nodes"] if n["name"] == "load")
    assert load["args"]["code"] == "print('iris@2 after iris@1')"
    assert check_version(monitor, second) == check  # once per version
    assert Retraining.objects.count() == 1


def test_a_small_change_without_drift_is_recorded_and_starts_nothing(world, watched):
    monitor, _first = watched
    rows = iris_like().decode().splitlines()
    rows[5] = "5.80,3.00,c"  # one row of 150 changed
    check = check_version(monitor, dataset_version(monitor.dataset, {"iris.csv": ("\n".join(rows) + "\n").encode()}))
    assert check.changed_percent == pytest.approx(100 / 150)
    assert (check.drifted, check.triggered) == ([], False)
    assert not Retraining.objects.exists()


def test_the_drift_alert_fires_once_per_checked_version(world, watched):
    monitor, _first = watched
    project, alice = world.project_a, world.alice
    rule(project, alice, "dataset_drift", channels=[channel(project, alice)], name="data-drift")
    check = check_version(monitor, dataset_version(monitor.dataset, {"iris.csv": iris_like(shift=2.0)}))

    announce("dataset_checked", check.pk)
    announce("dataset_checked", check.pk)

    event = AlertEvent.objects.get(rule__name="data-drift")
    assert "iris@2 drifted from iris@1: sepal_length" in event.message


def test_triggers_within_the_cooldown_or_while_a_run_goes_are_skipped_and_the_owner_must_still_contribute(
    world, watched
):
    monitor, _first = watched
    rule_ = monitor.policy
    started = start_policy(rule_, Retraining.Reason.MANUAL)
    assert started.run is not None
    again = start_policy(rule_, Retraining.Reason.DRIFT)
    assert (again.status, again.run) == ("skipped", None)
    assert "still going" in again.message
    started.run.status = "succeeded"
    started.run.save()
    assert "cooldown" in start_policy(rule_, Retraining.Reason.DRIFT).message

    rule_.created_by = world.charlie  # an outsider as the owner: the run start refuses
    rule_.save()
    refused = start_policy(rule_, Retraining.Reason.MANUAL)
    assert (refused.status, refused.run) == ("failed", None)
    assert "may not start runs" in refused.message


def test_a_version_the_policys_own_run_wrote_does_not_start_it_again(world, watched):
    from apps.jobs.models import TaskRun

    monitor, _first = watched
    started = start_policy(monitor.policy, Retraining.Reason.MANUAL)
    task = TaskRun.objects.create(run=started.run, node="load")
    written = dataset_version(monitor.dataset, {"iris.csv": iris_like(shift=2.0)}, task_run=task)

    check = check_version(monitor, written)

    assert check.drifted == ["sepal_length"]
    assert not check.triggered
    assert "own retraining run" in check.message
    assert Retraining.objects.count() == 1
