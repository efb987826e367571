"""`manage.py demo` makes the "iris-sgd" study, and it runs: its trials are pipeline runs of the built-in templates
on the demo's iris dataset, whose sgd-train node logs val_accuracy at every epoch for the pruner."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from apps.console.demo import examples
from apps.hpo import services
from apps.hpo.models import Study, Trial
from apps.jobs.models import PipelineRun
from apps.models.models import ModelVersion
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


def test_the_demo_study_runs_its_20_trials_2_at_a_time_prunes_some_and_registers_the_best_model(api_agent):
    """Acceptance 1 of issue 23, without the browser: the demo's study to its end on a real agent, its page's chart
    data, and "Register best model" from the page."""
    call_command("demo", stdout=StringIO(), stderr=StringIO())
    study = Study.objects.get(project__slug="demo", name="iris-sgd")
    most_at_once = 0

    def watch(s: Study) -> bool:
        nonlocal most_at_once
        most_at_once = max(most_at_once, s.trials.filter(status=Trial.Status.RUNNING).count())
        return s.is_finished

    study = drive_study(study, timeout=900, until=watch)
    for run in PipelineRun.objects.filter(hpo_trials__study=study):
        drive(run)  # a pruned trial's run may still be stopping when the study completes

    trials = list(study.trials.order_by("number"))
    assert study.status == Study.Status.COMPLETED, (study.reason, [(t.number, t.status, t.reason) for t in trials])
    assert [t.number for t in trials] == list(range(20))
    assert most_at_once == 2
    statuses = [t.status for t in trials]
    assert set(statuses) <= {Trial.Status.COMPLETE, Trial.Status.PRUNED}, [(t.status, t.reason) for t in trials]
    assert statuses.count(Trial.Status.PRUNED) >= 1, [(t.number, t.params, t.intermediate) for t in trials]
    for trial in trials:
        if trial.status == Trial.Status.PRUNED:
            assert trial.reason.startswith("Pruned at step")
            assert trial.last_step < 15
    best = study.best_trials()[0]
    assert best.value > 0.8

    client = Client()
    client.force_login(study.created_by)
    page = client.get(f"/p/demo/studies/{study.pk}/")
    assert page.status_code == 200
    data = json.loads(json.dumps(page.context["chart_data"]))  # what the page embeds for its charts
    assert len(data["trials"]) == 20
    assert {t["status"] for t in data["trials"]} >= {"complete", "pruned"}
    assert set(data["importance"]) <= set(study.space)
    assert data["importance"]

    response = client.post(f"/p/demo/studies/{study.pk}/register-best/", {"name": "iris-sgd-best"})
    assert response.status_code == 302, response.content
    version = ModelVersion.objects.get(registered_model__project=study.project, registered_model__name="iris-sgd-best")
    assert version.run == services.trial_tracking_run(best)
    assert version.source == f"{version.run.artifact_uri}/model"
    assert {t.key: t.value for t in version.tags.all()}["hpo.trial"] == str(best.number)
