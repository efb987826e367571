"""A real study on the local runtime: trials are pipeline runs of a scikit-learn task on a real agent, their
accuracy reaches Optuna through the portal's MLflow API, the median pruner stops bad trials while they run, and the
best trial's model goes to the registry."""

from __future__ import annotations

import contextlib

import psutil
import pytest

from apps.hpo import services, storage
from apps.hpo.models import Study, Trial
from apps.jobs.models import PipelineRun
from apps.models import artifacts
from tests.factories import python_template
from tests.hpo.conftest import drive_study, train_code
from tests.jobs.conftest import drive, processes_with

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def document(**overrides):
    doc = {
        "name": "iris-c",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "space": {"C": {"type": "float", "low": 1e-5, "high": 10.0, "log": True}},
        "algorithm": "random",
        "early_stopping": {"algorithm": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
        "budget": {"max_trials": 6, "parallel_trials": 2, "max_failed_trials": 1},
        "seed": 3,
        "trial_template": {"job_template": "py", "args": {"code": train_code()}},
    }
    doc.update(overrides)
    return doc


def test_a_study_runs_its_trials_as_runs_prunes_bad_ones_and_finds_a_good_c(api_agent, project, owner):
    python_template()

    study = drive_study(services.create_study(project, owner, document()))

    for run in PipelineRun.objects.filter(hpo_trials__study=study):
        drive(run)  # a pruned trial's run may still be stopping when the study completes
    trials = list(study.trials.select_related("run").order_by("number"))
    assert study.status == Study.Status.COMPLETED, (study.reason, [(t.number, t.status, t.reason) for t in trials])
    assert [t.number for t in trials] == [0, 1, 2, 3, 4, 5]
    assert {t.status for t in trials} <= {Trial.Status.COMPLETE, Trial.Status.PRUNED}
    for trial in trials:  # every trial is an ordinary run of the project, tagged with the study
        assert trial.run.project == project
        assert trial.run.trigger == "study"
        assert trial.run.pipeline_name == f"iris-c-trial-{trial.number}"
        assert trial.run.spec["env"]["HPO_STUDY"] == "iris-c"
        assert f"C = {trial.params['C']!r}" in trial.run.spec["nodes"][0]["args"]["code"]
        tracked = services.trial_tracking_run(trial)
        assert tracked.experiment.name == "iris-c"
        assert {p.key: p.value for p in tracked.params.all()}["trial.C"] == str(trial.params["C"])
        assert {t.key: t.value for t in tracked.tags.all()}["hpo.trial"] == str(trial.number)
    complete = [t for t in trials if t.status == Trial.Status.COMPLETE]
    pruned = [t for t in trials if t.status == Trial.Status.PRUNED]
    assert pruned, [(t.number, t.params, t.intermediate) for t in trials]
    for trial in pruned:  # stopped while it ran: its run cancelled before the last step
        assert trial.reason.startswith("Pruned at step")
        assert trial.run.status == "cancelled"
        assert trial.last_step < 4
    for trial in complete:
        assert trial.run.status == "succeeded"
        assert trial.values == [trial.intermediate["4"]]  # the final value is the last logged one
    best = study.best_trials()[0]
    assert best.value == max(t.value for t in complete)
    assert best.value > 0.9
    assert set(study.importance) == {"C"}
    # Optuna's own storage agrees with the portal's rows.
    optuna_trials = storage.load(study).get_trials(deepcopy=False)
    assert [t.state.name for t in optuna_trials] == [t.status.upper() for t in trials]
    assert PipelineRun.objects.filter(hpo_trials__study=study).count() == 6

    # "Register best model": a version of the registry from the best trial's tracking run and its logged model.
    version = services.register_best_model(study, owner, "iris-tuned")
    assert (version.registered_model.project, version.version) == (project, 1)
    assert version.run == services.trial_tracking_run(best)
    assert version.source == f"{version.run.artifact_uri}/model"
    assert artifacts.open_file(version.source.split("mlflow-artifacts:/", 1)[1] + "/MLmodel") is not None


def test_a_trial_whose_process_was_killed_is_failed_and_replaced(agent, project, owner):
    python_template()
    code = "import time; print('hpo-kill-${trial.number}', flush=True); time.sleep(120)"
    study = services.create_study(project, owner, document(
        early_stopping="none", budget={"max_trials": 3, "parallel_trials": 1, "max_failed_trials": 2},
        trial_template={"job_template": "py", "args": {"code": code}},
    ))  # fmt: skip
    drive_study(study, until=lambda s: processes_with("hpo-kill-0"))
    for process in processes_with("hpo-kill-0"):
        with contextlib.suppress(psutil.NoSuchProcess):  # the sandbox's parent dies first and takes its child along
            process.kill()

    study = drive_study(study, until=lambda s: processes_with("hpo-kill-1"))

    first, second = study.trials.order_by("number")
    assert first.status == Trial.Status.FAILED
    assert first.run.status == "failed"
    assert first.reason == first.run.reason
    assert second.status == Trial.Status.RUNNING  # its replacement
    assert services.stop_study(study).status == Study.Status.STOPPED
    assert drive(second.run).status == "cancelled"


def test_the_study_resumes_after_the_agent_and_the_workers_restart(api_agent, project, owner):
    python_template()
    study = services.create_study(project, owner, document(
        early_stopping="none", budget={"max_trials": 3, "parallel_trials": 1},
        trial_template={"job_template": "py", "args": {"code": train_code(steps=2, pause=0.2)}},
    ))  # fmt: skip
    drive_study(study, until=lambda s: s.trials.filter(status="complete").exists())
    api_agent.stop()
    storage.forget()  # a worker restarts: no Optuna storage, sampler or study in memory
    api_agent.start()

    study = drive_study(study)

    assert study.status == Study.Status.COMPLETED
    trials = list(study.trials.values_list("number", "status", "reason", "run__reason"))
    assert [t[:2] for t in trials] == [(0, "complete"), (1, "complete"), (2, "complete")], trials
    assert len(storage.load(study).get_trials(deepcopy=False)) == 3
