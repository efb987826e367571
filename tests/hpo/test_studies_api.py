"""/api/v1/studies/: members create a study from its definition (400 naming each bad field, nothing written), list,
read its trials, stop it and register the best trial's model; another tenant's study is 404."""

from __future__ import annotations

from apps.hpo import driver
from apps.hpo.models import Study, Trial
from apps.jobs.models import RunStatus
from apps.models.models import LatestMetric, ModelVersion
from tests import factories
from tests.conftest import user_client
from tests.hpo.factories import study, study_document

URL = "/api/v1/studies/"


def test_an_editor_creates_a_study_and_it_starts_trials(world):
    response = user_client(world.bob).post(URL, {"project": "project-a", **study_document()}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["status"], body["algorithm"], body["max_trials"]) == ("tune", "running", "tpe", 4)
    assert body["early_stopping"] == {"algorithm": "none"}
    assert body["created_by"] == "bob"
    made = Study.objects.get(pk=body["id"])
    driver.advance_study(made.pk)
    trials = user_client(world.bob).get(f"{URL}{made.pk}/trials/").json()["results"]
    assert [(t["number"], t["status"]) for t in trials] == [(0, "running"), (1, "running")]
    assert set(trials[0]["params"]) >= {"C", "solver"}


def test_bad_fields_answer_400_naming_them_and_write_nothing(world):
    doc = study_document(space={"C": {"type": "float", "low": 2, "high": 1}}, budget={"max_trials": 0})
    response = user_client(world.bob).post(URL, {"project": "project-a", **doc}, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert "space.C.high" in errors
    assert "budget.max_trials" in errors
    assert not Study.objects.exists()


def test_another_tenant_cannot_see_or_stop_a_study(world):
    made = study(world.project_a, world.alice)
    charlie = user_client(world.charlie)
    assert charlie.get(f"{URL}{made.pk}/").status_code == 404
    assert charlie.get(f"{URL}{made.pk}/trials/").status_code == 404
    assert charlie.post(f"{URL}{made.pk}/stop/").status_code == 404
    assert charlie.get(URL).json()["results"] == []
    assert charlie.post(URL, {"project": "project-a", **study_document()}, format="json").status_code in (400, 404)
    assert Study.objects.count() == 1


def test_stop_cancels_the_trials(world):
    made = study(world.project_a, world.alice)
    driver.advance_study(made.pk)
    response = user_client(world.bob).post(f"{URL}{made.pk}/stop/")
    assert response.status_code == 200
    assert response.json()["status"] == "stopped"
    assert set(made.trials.values_list("status", flat=True)) == {"failed"}


def test_register_best_registers_the_best_trials_tracking_run(world):
    made = study(world.project_a, world.alice)
    driver.advance_study(made.pk)
    for trial, accuracy in zip(made.trials.select_related("run"), (0.91, 0.97), strict=True):
        run = factories.tracking_run(world.project_a, world.alice)
        run.source_pipeline_run = trial.run
        run.save()
        LatestMetric.objects.create(run=run, key="val_accuracy", value=accuracy, timestamp=1, step=3)
        trial.run.status = RunStatus.SUCCEEDED
        trial.run.save()
    driver.advance_study(made.pk)
    best = made.trials.get(status=Trial.Status.COMPLETE, values=[0.97])

    response = user_client(world.bob).post(f"{URL}{made.pk}/register-best/", {"name": "iris-tuned"}, format="json")

    assert response.status_code == 201, response.content
    version = ModelVersion.objects.get(registered_model__name="iris-tuned", registered_model__project=world.project_a)
    assert response.json() == {"name": "iris-tuned", "version": 1, "source": version.source}
    assert version.run.source_pipeline_run == best.run
    assert version.source == f"{version.run.artifact_uri}/model"
    assert {t.key: t.value for t in version.tags.all()}["hpo.trial"] == str(best.number)
    assert user_client(world.bob).get(f"{URL}{made.pk}/").json()["best_trial"]["values"] == [0.97]


def test_register_best_before_any_trial_completed_is_400(world):
    made = study(world.project_a, world.alice)
    response = user_client(world.bob).post(f"{URL}{made.pk}/register-best/", {"name": "x"}, format="json")
    assert response.status_code == 400
    assert "study" in response.json()


def test_rerun_best_runs_the_best_trials_pipeline_with_arguments_replaced(world):
    from apps.jobs.models import PipelineRun

    made = study(world.project_a, world.alice)
    url = f"{URL}{made.pk}/rerun-best/"
    assert user_client(world.bob).post(url, {}, format="json").status_code == 400  # nothing complete yet
    driver.advance_study(made.pk)
    best = made.trials.select_related("run").get(number=0)
    run = factories.tracking_run(world.project_a, world.alice)
    run.source_pipeline_run = best.run
    run.save()
    LatestMetric.objects.create(run=run, key="val_accuracy", value=0.9, timestamp=1, step=1)
    best.run.status = RunStatus.SUCCEEDED
    best.run.save()
    driver.advance_study(made.pk)

    more = {"trial": {"code": "print('all the data', ${trial.C})"}}
    trials = made.trials.count()
    response = user_client(world.bob).post(url, {"args": more}, format="json")

    assert response.status_code == 201, response.content
    rerun = PipelineRun.objects.get(pk=response.json()["run"])
    assert rerun.pipeline_name == f"tune-best-{best.number}"
    assert rerun.trigger == "manual"  # an ordinary run, not a trial of the study
    assert rerun.spec["nodes"][0]["args"]["code"] == f"print('all the data', {best.params['C']})"
    assert rerun.spec["env"]["HPO_TRIAL"] == str(best.number)
    assert made.trials.count() == trials  # the study did not grow a trial
    bad = user_client(world.bob).post(url, {"args": {"nope": {"x": 1}}}, format="json")
    assert bad.status_code == 400
    assert "args.nope" in bad.json()
    assert user_client(world.charlie).post(url, {}, format="json").status_code == 404
