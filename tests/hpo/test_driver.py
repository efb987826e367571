"""The study driver's pass without an agent: it asks while slots are free, tells ended runs, fails dead trials and
replaces them, stops on the deadline, leaves a study another pass holds alone, and fails Optuna trials a dead pass
left behind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.hpo import driver, services, storage
from apps.hpo.models import Study, Trial
from apps.jobs.models import PipelineRun, RunStatus
from tests.factories import ProjectFactory, UserFactory
from tests.hpo.factories import study as make_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return UserFactory(username="alice")


@pytest.fixture
def study(owner):
    return make_study(ProjectFactory(owner=owner, slug="project-a"), owner)


def states(study: Study) -> list[tuple[int, str]]:
    return list(study.trials.order_by("number").values_list("number", "status"))


def test_a_pass_fills_the_parallel_slots_with_runs(study):
    driver.advance_study(study.pk)
    trials = list(study.trials.select_related("run"))
    assert [(t.number, t.status, t.run.status) for t in trials] == [(0, "running", "queued"), (1, "running", "queued")]
    for trial in trials:
        assert 1e-3 <= trial.params["C"] <= 10
        assert ("l1_ratio" in trial.params) == (trial.params["solver"] == "saga")  # the conditional parameter
        code = trial.run.spec["nodes"][0]["args"]["code"]
        assert code == f"print({trial.params['C']}, '{trial.params['solver']}', '{trial.params.get('l1_ratio', '')}')"
    driver.advance_study(study.pk)  # nothing ended: nothing more
    assert study.trials.count() == 2


def test_a_trial_whose_run_failed_is_told_failed_and_replaced(study):
    driver.advance_study(study.pk)
    first = study.trials.get(number=0)
    first.run.status, first.run.reason = RunStatus.FAILED, "agent lost"  # what reconcile writes for a dead agent
    first.run.save()
    driver.advance_study(study.pk)
    first.refresh_from_db()
    assert (first.status, first.reason) == ("failed", "agent lost")
    assert states(study) == [(0, "failed"), (1, "running"), (2, "running")]
    assert storage.load(study).trials[0].state.name == "FAIL"


def test_a_trial_whose_run_was_deleted_is_failed(study):
    driver.advance_study(study.pk)
    study.trials.get(number=1).run.delete()
    driver.advance_study(study.pk)
    assert study.trials.get(number=1).reason == "Its pipeline run was deleted."


def test_a_succeeded_run_without_the_metric_fails_its_trial(study):
    driver.advance_study(study.pk)
    run = study.trials.get(number=0).run
    run.status = RunStatus.SUCCEEDED
    run.save()
    driver.advance_study(study.pk)
    assert study.trials.get(number=0).reason == "The run logged no metric “val_accuracy”."


def test_too_many_failures_fail_the_study_and_cancel_the_rest(study):
    Study.objects.filter(pk=study.pk).update(max_failed_trials=0)
    driver.advance_study(study.pk)
    run = study.trials.get(number=0).run
    run.status = RunStatus.FAILED
    run.save()
    study = driver.advance_study(study.pk)
    assert study.status == "failed"
    assert study.reason == "1 trials failed (at most 0 may)."
    other = study.trials.get(number=1)
    assert other.status == "failed"
    assert other.run.status == "cancelling"


def test_the_deadline_stops_the_study(study):
    driver.advance_study(study.pk)
    Study.objects.filter(pk=study.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    study = driver.advance_study(study.pk)
    assert (study.status, study.reason) == ("stopped", "The deadline was reached.")
    assert {t.run.status for t in study.trials.select_related("run")} == {"cancelling"}


def test_stop_cancels_the_running_trials(study):
    driver.advance_study(study.pk)
    stopped = services.stop_study(study)
    assert stopped.status == "stopped"
    assert states(stopped) == [(0, "failed"), (1, "failed")]
    assert driver.advance_study(study.pk) is None  # a finished study is left alone
    assert services.stop_study(stopped).status == "stopped"  # twice is fine


def test_a_study_another_pass_holds_is_left_alone(study):
    Study.objects.filter(pk=study.pk).update(lease_until=timezone.now() + timedelta(minutes=1))
    assert driver.advance_study(study.pk) is None
    assert not study.trials.exists()
    Study.objects.filter(pk=study.pk).update(lease_until=timezone.now() - timedelta(seconds=1))  # that pass died
    assert driver.advance_study(study.pk) is not None
    assert study.trials.count() == 2


def test_an_optuna_trial_a_dead_pass_left_running_is_failed(study):
    orphan = storage.load(study).ask()  # asked, then the pass died before making its row, holding the study
    Study.objects.filter(pk=study.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    driver.advance_study(study.pk)
    assert storage.load(study).trials[orphan.number].state.name == "FAIL"
    assert [t.number for t in study.trials.all()] == [1, 2]


@pytest.mark.parametrize("where", ["add", "start"])
def test_a_pass_that_fails_after_asking_tells_its_trials_failed(study, monkeypatch, where):
    def broken(*args, **kwargs):
        raise RuntimeError("database went away")

    # While freezing the first trial's run (one asked), or when starting the pass's runs (both asked).
    monkeypatch.setattr(driver.RunBatch, where, broken)
    with pytest.raises(RuntimeError):
        driver.advance_study(study.pk)
    asked = 1 if where == "add" else 2
    assert [t.state.name for t in storage.load(study).get_trials(deepcopy=False)] == ["FAIL"] * asked
    assert not study.trials.exists()  # the pass's rows rolled back
    assert not PipelineRun.objects.exists()
    assert Study.objects.get(pk=study.pk).lease_until is None  # let go: the next pass starts over
    monkeypatch.undo()
    driver.advance_study(study.pk)
    assert [t.number for t in study.trials.all()] == [asked, asked + 1]


def test_a_pass_that_fails_after_telling_leaves_the_trial_to_the_next_pass(study, monkeypatch):
    driver.advance_study(study.pk)
    run = study.trials.get(number=0).run
    run.status, run.reason = RunStatus.FAILED, "agent lost"
    run.save()

    def broken(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(driver, "_tag_tracking_runs", broken)  # after Optuna was told, before the rows commit
    with pytest.raises(RuntimeError):
        driver.advance_study(study.pk)
    assert storage.load(study).trials[0].state.name == "FAIL"
    assert states(study) == [(0, "running"), (1, "running")]  # the trials' transaction rolled back
    assert Study.objects.get(pk=study.pk).lease_until is None
    monkeypatch.undo()
    driver.advance_study(study.pk)  # tells again (Optuna skips it) and saves the end
    assert study.trials.get(number=0).reason == "agent lost"
    assert states(study) == [(0, "failed"), (1, "running"), (2, "running")]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit is PostgreSQL's")
def test_optunas_commits_do_not_wait_for_the_flush():
    with storage.get_storage().engine.connect() as optuna_connection:
        assert optuna_connection.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
        assert optuna_connection.exec_driver_sql("SHOW search_path").scalar() == "hpo"


def test_a_grid_search_stops_asking_when_the_grid_is_done(owner):
    project = ProjectFactory(owner=owner, slug="project-g")
    grid = make_study(
        project, owner, name="grid", algorithm="grid", space={"k": {"type": "categorical", "choices": ["a", "b"]}},
        budget={"max_trials": 10, "parallel_trials": 5},
        trial_template={"job_template": "py", "args": {"code": "print('${trial.k}')"}},
    )  # fmt: skip
    driver.advance_study(grid.pk)
    assert sorted(t.params["k"] for t in grid.trials.all()) == ["a", "b"]


def test_a_trial_whose_values_make_an_invalid_run_fails_without_a_run(owner):
    project = ProjectFactory(owner=owner, slug="project-v")
    bad = make_study(
        project, owner, name="bad", space={"cpu": {"type": "categorical", "choices": [0.1, -1]}},
        budget={"max_trials": 2, "parallel_trials": 2, "max_failed_trials": 5},
        trial_template={"spec": {"nodes": [{"name": "t", "template": "py", "args": {"code": "pass"},
                                             "resources": {"cpu": "${trial.cpu}"}}]}},
    )  # fmt: skip
    driver.advance_study(bad.pk)
    failed = [t for t in bad.trials.all() if t.params["cpu"] == -1]
    for trial in failed:
        assert (trial.status, trial.run) == (Trial.Status.FAILED, None)
        assert "resources" in trial.reason


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_deleting_the_project_deletes_its_optuna_studies(owner):
    import optuna

    from apps.projects.services import delete_project

    project = ProjectFactory(owner=owner, slug="project-d")
    made = make_study(project, owner)
    driver.advance_study(made.pk)
    assert storage.load(made).trials

    delete_project(project)

    assert not Study.objects.exists()
    assert made.optuna_name not in {s.study_name for s in optuna.get_all_study_summaries(storage.get_storage())}


def test_a_trial_run_that_ends_kicks_its_study_at_once(study, monkeypatch):
    from apps.hpo import services as hpo_services
    from apps.jobs import orchestrator

    assert hpo_services.kick_for_run in orchestrator._run_finished  # registered by the app
    driver.advance_study(study.pk)
    kicked = []
    monkeypatch.setattr(hpo_services, "enqueue", lambda task, *args: kicked.append((task.name, args)))
    run = study.trials.get(number=0).run
    hpo_services.kick_for_run(run)
    assert kicked == [("apps.hpo.tasks.advance_study", (study.pk,))]
    run.trigger = "manual"
    hpo_services.kick_for_run(run)  # not a trial's run: nothing
    assert len(kicked) == 1


def test_the_nodes_that_use_the_trials_values_are_never_served_from_the_cache(owner):
    from tests.factories import python_template

    python_template()
    project = ProjectFactory(owner=owner, slug="project-c")
    spec = {"nodes": [{"name": "prep", "template": "py", "args": {"code": "print('data')"}},
                      {"name": "train", "template": "py", "args": {"code": "print(${trial.C})"},
                       "depends_on": ["prep"]}]}  # fmt: skip
    made = make_study(project, owner, name="cached", trial_template={"spec": spec})
    driver.advance_study(made.pk)
    nodes = {n["name"]: n for n in made.trials.first().run.spec["nodes"]}
    assert (nodes["prep"]["cache"], nodes["train"]["cache"]) == (True, False)


def test_a_study_whose_owner_may_no_longer_start_runs_fails_without_asking(owner):
    from apps.projects.models import Role
    from tests.factories import add_member

    project = ProjectFactory(owner=owner, slug="project-p")
    bob = UserFactory(username="bob")
    add_member(project, bob, Role.EDITOR)
    made = make_study(project, bob)
    driver.advance_study(made.pk)  # trial 0 and 1 start as bob
    run = made.trials.get(number=0).run
    run.status = RunStatus.FAILED
    run.save()
    add_member(project, bob, Role.VIEWER)  # bob may look, no longer run

    driver.advance_study(made.pk)

    made.refresh_from_db()
    assert (made.status, made.reason) == ("failed", "The study's owner may no longer start runs here.")
    assert states(made) == [(0, "failed"), (1, "failed")]  # the running one stopped with the study
    assert len(storage.load(made).get_trials(deepcopy=False)) == 2  # no trial asked for nothing


def test_the_trials_tracking_runs_are_tagged_and_get_the_trials_values_as_params(study, owner):
    from apps.models.models import LatestMetric, Param
    from tests import factories

    driver.advance_study(study.pk)
    tracked = {}
    for trial in study.trials.select_related("run"):
        run = factories.tracking_run(study.project, owner)
        run.source_pipeline_run = trial.run
        run.save()
        LatestMetric.objects.create(run=run, key="val_accuracy", value=0.9, timestamp=1, step=1)
        trial.run.status = RunStatus.SUCCEEDED
        trial.run.save()
        tracked[trial.number] = run
    Param.objects.create(run=tracked[1], key="trial.C", value="as the task logged it")

    driver.advance_study(study.pk)

    for number, run in tracked.items():
        trial = study.trials.get(number=number)
        assert trial.status == "complete"
        assert {t.key: t.value for t in run.tags.all()}.items() >= {("hpo.study", "tune"), ("hpo.trial", str(number))}
        params = {p.key: p.value for p in run.params.all()}
        assert params["trial.solver"] == trial.params["solver"]
        assert params["trial.C"] == (str(trial.params["C"]) if number == 0 else "as the task logged it")
        assert services.trial_tracking_run(trial) == run


def test_a_trial_optuna_has_pruned_whose_rows_rolled_back_is_pruned_again(owner):
    from optuna.trial import TrialState

    from apps.models.models import Metric
    from tests import factories

    study = make_study(ProjectFactory(owner=owner, slug="project-a"), owner, early_stopping="median")
    driver.advance_study(study.pk)
    trial = study.trials.select_related("run").get(number=0)
    trial.run.status = RunStatus.RUNNING
    trial.run.save()
    tracked = factories.tracking_run(study.project, owner)
    tracked.source_pipeline_run = trial.run
    tracked.save()
    for step in (1, 2):
        Metric.objects.create(run=tracked, key="val_accuracy", value=0.5, timestamp=step, step=step)
    # A pass reported step 1, told Optuna PRUNED, and its rows rolled back (the trial is still running here).
    ostudy = storage.load(study)
    ostudy._storage.set_trial_intermediate_value(trial.optuna_trial_id, 1, 0.5)
    ostudy._storage.set_trial_state_values(trial.optuna_trial_id, TrialState.PRUNED)

    driver.advance_study(study.pk)  # step 2 cannot be reported to a finished trial: it is pruned again

    trial.refresh_from_db()
    assert (trial.status, trial.reason) == ("pruned", "Pruned at step 2: val_accuracy = 0.5.")
    assert trial.run.status == "cancelling"


def test_a_pass_makes_no_more_statements_for_more_trials(owner):
    from django.test.utils import CaptureQueriesContext

    project = ProjectFactory(owner=owner, slug="project-n")

    def statements_of_first_pass(n: int) -> int:
        made = make_study(project, owner, name=f"n{n}", budget={"max_trials": n, "parallel_trials": n})
        with CaptureQueriesContext(connection) as queries:
            driver.advance_study(made.pk)
        assert made.trials.filter(run__status="queued").count() == n
        return len(queries)

    # The runs' start reads the quota, the agent's capacity and the template once, numbers and inserts the runs
    # and their queued advances in one statement each, and the trials' rows in one more (Optuna's own statements,
    # on its own connection, are not counted here).
    # On the code before the batch: 23 statements for one trial, 63 for five.
    assert statements_of_first_pass(5) == statements_of_first_pass(1)


def test_a_trial_beyond_the_projects_quota_fails_and_the_others_of_its_pass_start(owner):
    project = ProjectFactory(owner=owner, slug="project-q")
    project.quota.cpu_cores = 1
    project.quota.save()
    grid = make_study(
        project, owner, name="quota", algorithm="grid", space={"cpu": {"type": "categorical", "choices": [0.5, 4]}},
        budget={"max_trials": 2, "parallel_trials": 2, "max_failed_trials": 5},
        trial_template={"spec": {"nodes": [{"name": "t", "template": "py", "args": {"code": "pass"},
                                             "resources": {"cpu": "${trial.cpu}"}}]}},
    )  # fmt: skip
    driver.advance_study(grid.pk)
    trials = {t.params["cpu"]: t for t in grid.trials.select_related("run")}
    assert (trials[0.5].status, trials[0.5].run.status) == ("running", "queued")
    assert (trials[4].status, trials[4].run) == ("failed", None)
    assert "the limit is 1 (the project's quota)" in trials[4].reason
    told = {t.number: t.state.name for t in storage.load(grid).get_trials(deepcopy=False)}
    assert told == {trials[0.5].number: "RUNNING", trials[4].number: "FAIL"}
