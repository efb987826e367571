"""`manage.py demo` makes the "iris-sgd" study, and it runs: its trials are pipeline runs of the built-in templates
on the demo's iris dataset, whose sgd-train node logs val_accuracy at every epoch for the pruner."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from apps.console.demo import examples
from apps.hpo import services
from apps.hpo.models import Study, Trial
from apps.jobs.models import PipelineRun
from tests.hpo.conftest import drive_study
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_the_demo_command_makes_the_iris_study_once_and_its_trials_train_and_report_each_epoch(api_agent):
    names = [name for name, _make in examples()]
    assert names.index("iris-sgd study") > names.index("iris dataset")  # its trials read the iris dataset

    call_command("demo", stdout=StringIO(), stderr=StringIO())
    call_command("demo", stdout=StringIO(), stderr=StringIO())  # idempotent: still one study

    study = Study.objects.get(project__slug="demo")
    assert (study.name, study.status, study.algorithm, study.early_stopping) == ("iris-sgd", "running", "tpe", "median")
    assert (study.max_trials, study.parallel_trials) == (20, 2)
    assert [n["template"] for n in study.template["nodes"]] == ["dataset-load", "data-split", "sgd-train"]

    study = drive_study(study, timeout=300, until=lambda s: s.trials.exclude(status=Trial.Status.RUNNING).count() >= 2)
    services.stop_study(study)  # the other 18 trials are not this test's business

    ended = list(study.trials.exclude(status=Trial.Status.RUNNING).select_related("run").order_by("number"))
    for trial in ended[:2]:
        assert trial.status == Trial.Status.COMPLETE, (trial.status, trial.reason)
        assert trial.run.project == study.project
        assert [t.node for t in trial.run.tasks.order_by("created_at")] == ["load", "split", "train"]
        assert sorted(map(int, trial.intermediate)) == list(range(1, 16))  # every epoch reached Optuna
        assert trial.values == [trial.intermediate["15"]]
        assert 0 <= trial.values[0] <= 1
        tracked = services.trial_tracking_run(trial)
        params = {p.key: p.value for p in tracked.params.all()}
        assert params["loss"] == trial.params["loss"] == params["trial.loss"]
    assert max(t.values[0] for t in ended[:2]) > 0.6
    for run in PipelineRun.objects.filter(hpo_trials__study=study):
        drive(run)  # the stopped trials' runs end before the agent does
