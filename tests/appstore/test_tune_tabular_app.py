"""The built-in "tune a tabular model" app: installed into a fresh project, its study runs to the end on a real agent
(trials are pipeline runs over the shipped wine data), the best model goes to the registry, and uninstalling
removes the study with its Optuna study."""

from __future__ import annotations

import pytest

from apps.appstore.services import install, uninstall
from apps.hpo import services as hpo
from apps.hpo import storage
from apps.hpo.models import Study, Trial
from apps.jobs.models import PipelineRun
from tests.appstore.factories import builtin_version
from tests.factories import ProjectFactory, UserFactory
from tests.hpo.conftest import drive_study
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_the_app_installs_a_study_that_tunes_on_the_wine_data_and_uninstalls_it(api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")

    installation = install(
        builtin_version("tune-tabular"), project, owner, name="wine", parameters={"max_trials": 3, "parallel_trials": 2}
    )

    [dataset] = installation.objects_of("datasets")
    [study] = installation.objects_of("studies")
    assert (dataset.name, study.name, study.project) == ("wine-wine", "wine", project)
    assert (study.max_trials, study.parallel_trials, study.status) == (3, 2, Study.Status.RUNNING)
    assert study.template["nodes"][0]["args"] == {"dataset": "wine-wine"}
    assert study.template["nodes"][2]["args"]["loss"] == "${trial.loss}"  # the app's placeholders only

    study = drive_study(study, timeout=300)

    trials = list(study.trials.select_related("run").order_by("number"))
    assert study.status == Study.Status.COMPLETED, (study.reason, [(t.number, t.status, t.reason) for t in trials])
    assert [t.status for t in trials] == [Trial.Status.COMPLETE] * 3  # the pruner starts after 4 trials
    for trial in trials:
        assert sorted(map(int, trial.intermediate)) == list(range(1, 16))
        assert [t.node for t in trial.run.tasks.order_by("created_at")] == ["load", "split", "train"]
    best = study.best_trials()[0]
    assert best.value > 0.85  # standardised wine is close to linearly separable
    version = hpo.register_best_model(study, owner, "wine-best")
    assert version.run == hpo.trial_tracking_run(best)

    uninstall(installation)

    assert not Study.objects.filter(pk=study.pk).exists()
    import optuna

    assert study.optuna_name not in optuna.get_all_study_names(storage.get_storage())
    assert PipelineRun.objects.filter(project=project, trigger="study").count() == 3  # runs are history, they stay
    for run in PipelineRun.objects.filter(project=project):
        drive(run)
