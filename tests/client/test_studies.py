"""Studies from the SDK and `portal studies`: created from YAML, trials run as real runs on the live portal's agent
(tracked through its MLflow API), the best trial's model registered; stop; bad definitions and other tenants'
studies are clear errors."""

from __future__ import annotations

import json

import pytest
import yaml
from portal_client import BadRequest, NotFound

from apps.hpo.models import Study
from apps.jobs.models import PipelineRun
from apps.models.models import ModelVersion
from tests.client.expect import fails
from tests.client.test_cli import logged_in  # noqa: F401 - fixture
from tests.hpo.conftest import drive_study, train_code
from tests.hpo.factories import study_document
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def definition(**overrides):
    doc = {
        "name": "iris-c",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "space": {"C": {"type": "float", "low": 1e-2, "high": 10.0, "log": True}},
        "algorithm": "random",
        "budget": {"max_trials": 2, "parallel_trials": 2},
        "seed": 3,
        "trial_template": {"job_template": "py", "args": {"code": train_code(steps=1, pause=0)}},
    }
    doc.update(overrides)
    return doc


def test_a_study_from_yaml_runs_its_trials_and_registers_the_best_model(logged_in, cli, tmp_path):  # noqa: F811
    study_document()  # the `py` template
    source = tmp_path / "study.yaml"
    source.write_text(yaml.safe_dump({"project": "project-a", **definition()}))

    made = cli("studies", "create", "-f", str(source), "-o", "json")
    assert made.exit_code == 0, made.output
    body = json.loads(made.stdout)
    assert (body["name"], body["status"], body["max_trials"]) == ("iris-c", "running", 2)
    study = drive_study(Study.objects.get(pk=body["id"]))
    for run in PipelineRun.objects.filter(hpo_trials__study=study):
        drive(run)

    shown = cli("studies", "get", "project-a/iris-c", "-o", "json")
    assert json.loads(shown.stdout)["status"] == "completed", shown.stdout
    trials = cli("studies", "trials", "project-a/iris-c")
    assert trials.stdout.splitlines()[0].split() == ["NUMBER", "STATUS", "PARAMS", "VALUES", "RUN"]
    rows = json.loads(cli("studies", "trials", str(study.pk), "--json").stdout)
    assert [(t["number"], t["status"]) for t in rows] == [(0, "complete"), (1, "complete")]
    assert "iris-c" in cli("studies", "list", "-p", "project-a").stdout

    registered = cli("studies", "register-best", "project-a/iris-c", "--name", "iris", "-o", "json")
    assert registered.exit_code == 0, registered.output
    answer = json.loads(registered.stdout)
    assert (answer["name"], answer["version"]) == ("iris", 1)
    assert ModelVersion.objects.get(registered_model__name="iris").source == answer["source"]


def test_stop_and_clear_errors(portal, tmp_path):
    study_document()
    sleepy = definition(trial_template={"job_template": "py", "args": {"code": "import time; time.sleep(60)"}})
    with portal.client(portal.world.bob) as bob:  # an editor
        study = bob.studies.create("project-a", yaml.safe_dump(sleepy))
        assert study.status == "running"
        stopped = bob.studies.stop("project-a/iris-c")
        assert stopped.status == "stopped"
        with pytest.raises(BadRequest) as nothing:
            bob.studies.register_best(study.id, "iris")
        assert nothing.value.errors == {"study": ["No trial has completed yet."]}
        with pytest.raises(BadRequest) as bad:
            bob.studies.create("project-a", definition(name="other", budget={"max_trials": 0}))
        assert "budget.max_trials" in bad.value.errors
        assert [s.name for s in bob.studies.list("project-a")] == ["iris-c"]
    with portal.client(portal.world.charlie) as charlie:
        with pytest.raises(NotFound):
            charlie.studies.get(study.id)
        with pytest.raises(NotFound):
            charlie.studies.stop(study.id)


def test_command_line_errors_exit_with_their_codes(logged_in, cli, tmp_path):  # noqa: F811
    study_document()
    source = tmp_path / "study.yaml"
    source.write_text(yaml.safe_dump(definition(space={"C": {"type": "float", "low": 2, "high": 1}})))
    invalid = cli("studies", "create", "-f", str(source), "-p", "project-a")
    assert invalid.exit_code == 2
    assert invalid.stderr.startswith("Error (400): ")
    assert "space.C.high" in invalid.stderr
    assert not Study.objects.exists()
    assert cli("studies", "create", "-f", str(source)).exit_code == 2  # no project: a usage error
    assert cli("studies", "get", "project-a/none").exit_code == 6
    assert cli("studies", "stop", "999999").exit_code == 6
    fails(cli("studies", "trials", "project-a/none"), 6, "No study “none” in project “project-a”")
    fails(cli("studies", "register-best", "project-a/none", "--name", "iris"), 6)
    fails(cli("studies", "register-best", "project-a/none"), 2, "--name")
    fails(cli("studies", "list", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")

    sleepy = definition(trial_template={"job_template": "py", "args": {"code": "import time; time.sleep(60)"}})
    source.write_text(yaml.safe_dump(sleepy))
    assert cli("studies", "create", "-f", str(source), "-p", "project-a").exit_code == 0
    stopped = cli("studies", "stop", "project-a/iris-c", "-o", "json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout)["status"] == "stopped"
    fails(cli("studies", "register-best", "project-a/iris-c", "--name", "iris"), 2, "No trial has completed yet.")
