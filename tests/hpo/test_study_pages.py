"""Study pages: the list, the create form (errors on the field they concern, naming the exact setting), YAML import,
a study's page with its charts' data, trial table, status filter and CSV, stop; outsiders get 404, viewers 403."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from apps.hpo import driver
from apps.hpo.models import Study
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, python_template
from tests.hpo.factories import study, study_document

BASE = "/p/project-a/studies/"


@pytest.fixture
def alice_client(client, world):
    client.force_login(world.alice)
    return client


def form_data(**overrides):
    data = {
        "name": "tune-c", "metric": "val_accuracy", "direction": "maximize",
        "space": "C: {type: float, low: 0.001, high: 10, log: true}\n", "algorithm": "tpe",
        "early_stopping": "median", "max_trials": "4", "parallel_trials": "2", "max_failed_trials": "1",
        "template": "job_template: py\nargs: {code: 'print(${trial.C})'}\n",
    }  # fmt: skip
    data.update(overrides)
    return data


def test_the_form_makes_a_study(alice_client, world):
    python_template()
    response = alice_client.post(f"{BASE}new/", form_data())
    made = Study.objects.get(name="tune-c")
    assert response.status_code == 302
    assert response["Location"] == f"{BASE}{made.pk}/"
    assert (made.early_stopping, made.parallel_trials, made.objectives[0]["metric"]) == ("median", 2, "val_accuracy")


def test_the_form_shows_each_error_on_its_field(alice_client, world):
    python_template()
    response = alice_client.post(
        f"{BASE}new/", form_data(space="C: {type: float, low: 5, high: 1}\n", max_trials="1", parallel_trials="2")
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert any("space.C.high" in e for e in form.errors["space"])
    assert any("budget.parallel_trials" in e for e in form.errors["parallel_trials"])
    bad_yaml = alice_client.post(f"{BASE}new/", form_data(template="args: [unclosed"))
    assert "Not valid YAML" in bad_yaml.context["form"].errors["template"][0]
    assert not Study.objects.exists()


def test_yaml_import_makes_the_study(alice_client, world):
    document = yaml.safe_dump(study_document(name="from-yaml"))
    response = alice_client.post(f"{BASE}import/", {"document": document})
    assert response.status_code == 302
    assert Study.objects.get(name="from-yaml").algorithm == "tpe"
    refused = alice_client.post(f"{BASE}import/", {"document": "name: x\nspace: 3\n"})
    assert refused.status_code == 400
    assert any("space:" in e for e in refused.context["form"].non_field_errors())


def test_the_study_page_shows_trials_charts_and_csv(alice_client, world):
    made = study(world.project_a, world.alice)
    driver.advance_study(made.pk)
    page = alice_client.get(f"{BASE}{made.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-live="study:{made.pk}"' in html
    assert 'data-hpo-chart="parallel"' in html
    data = json.loads(html.split('id="study-chart-data" type="application/json">')[1].split("</script>")[0])
    assert [t["number"] for t in data["trials"]] == [0, 1]
    assert data["params"] == ["C", "solver", "l1_ratio"]
    assert "0 of 4 trials done (2 running" in html
    assert alice_client.get(f"{BASE}{made.pk}/?status=pruned").context["trials"].count() == 0
    rows = list(csv.reader(io.StringIO(alice_client.get(f"{BASE}{made.pk}/?format=csv").content.decode())))
    assert rows[0] == ["number", "status", "val_accuracy", "C", "solver", "l1_ratio", "run", "reason"]
    assert [r[0] for r in rows[1:]] == ["0", "1"]
    assert alice_client.get(BASE).context["studies"].get() == made


def test_stop_from_the_page(alice_client, world):
    made = study(world.project_a, world.alice)
    response = alice_client.post(f"{BASE}{made.pk}/stop/")
    assert response.status_code == 302
    made.refresh_from_db()
    assert made.status == "stopped"


def test_outsiders_get_404_and_viewers_cannot_create(client, world):
    made = study(world.project_a, world.alice)
    client.force_login(world.charlie)
    assert client.get(f"{BASE}{made.pk}/").status_code == 404
    assert client.get(BASE).status_code == 404
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert client.get(f"{BASE}{made.pk}/").status_code == 200
    assert client.post(f"{BASE}new/", form_data()).status_code == 403
    assert client.post(f"{BASE}{made.pk}/stop/").status_code == 403


def test_creating_and_stopping_a_study_is_audited(alice_client, world):
    from apps.audit.models import AuditEntry

    python_template()
    alice_client.post(f"{BASE}new/", form_data())
    made = Study.objects.get(name="tune-c")
    alice_client.post(f"{BASE}{made.pk}/stop/")
    entries = AuditEntry.objects.filter(object_type="hpo.study", object_id=str(made.pk))
    assert {e.action for e in entries} >= {"create", "update"}
    assert {e.actor for e in entries} == {world.alice}
    assert all(e.project == world.project_a for e in entries)


def test_the_best_trial_links_its_runs_and_registers_from_the_page(alice_client, world):
    from apps.jobs.models import RunStatus
    from apps.models.models import LatestMetric, ModelVersion
    from tests.factories import tracking_run

    made = study(world.project_a, world.alice)
    driver.advance_study(made.pk)
    trial = made.trials.select_related("run").get(number=0)
    tracked = tracking_run(world.project_a, world.alice)
    tracked.source_pipeline_run = trial.run
    tracked.save()
    LatestMetric.objects.create(run=tracked, key="val_accuracy", value=0.95, timestamp=1, step=1)
    trial.run.status = RunStatus.SUCCEEDED
    trial.run.save()
    driver.advance_study(made.pk)

    html = alice_client.get(f"{BASE}{made.pk}/").content.decode()
    assert f"/p/project-a/runs/{trial.run_id}/" in html
    assert f"/p/project-a/tracking-runs/{tracked.pk}/" in html
    assert "Register best model" in html
    response = alice_client.post(f"{BASE}{made.pk}/register-best/", {"name": "tuned"})
    assert response.status_code == 302
    assert ModelVersion.objects.get(registered_model__name="tuned").run == tracked
