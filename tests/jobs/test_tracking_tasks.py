"""The built-in training and register tasks against the portal's real MLflow-compatible API (uvicorn on
loopback) with a project token, as a pipeline runs them: the run, its params and metric, the model as an
MLflow Model, and a registered version with an alias, all in the token's project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.accounts.services import create_token
from apps.models.models import ModelAlias, ModelVersion, Run
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.test_builtin_tasks import run_task

pytestmark = [pytest.mark.live]


@pytest.fixture
def split(tmp_path: Path) -> Path:
    iris = run_task("iris_load", tmp_path / "iris")
    assert iris.returncode == 0, iris.stderr
    done = run_task("split", tmp_path / "split", "--label_column", "species", inputs={"iris": tmp_path / "iris"})
    assert done.returncode == 0, done.stderr
    return tmp_path / "split"


def test_train_tracks_and_register_registers_in_the_tokens_project(live_asgi, split, tmp_path):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    env = {"MLFLOW_TRACKING_URI": live_asgi.url, "MLFLOW_TRACKING_TOKEN": raw, "MLFLOW_EXPERIMENT_NAME": "iris"}

    train = run_task("sklearn_train", tmp_path / "train", inputs={"split": split}, **env)
    assert train.returncode == 0, train.stderr
    tracked = json.loads((tmp_path / "train" / "tracking.json").read_text())
    run = Run.objects.get(run_uuid=tracked["run_id"])
    assert run.experiment.project == project
    assert run.experiment.name == "iris"
    assert run.status == "FINISHED"
    assert {p.key: p.value for p in run.params.all()}["model"] == "logistic_regression"
    assert run.metrics.get(key="train_accuracy").value > 0.8

    register = run_task(
        "model_register", tmp_path / "register", "--name", "iris-classifier", "--alias", "production",
        inputs={"train": tmp_path / "train"}, **env,
    )  # fmt: skip
    assert register.returncode == 0, register.stderr
    version = ModelVersion.objects.get(registered_model__name="iris-classifier", registered_model__project=project)
    assert (version.version, version.status) == (1, "READY")
    assert version.source == tracked["model_source"]
    assert (
        ModelAlias.objects.get(registered_model=version.registered_model, alias="production").model_version == version
    )
    assert "registered iris-classifier version 1 from run" in register.stdout


def test_a_token_of_another_project_cannot_register_into_this_one(live_asgi, split, tmp_path):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    other_owner = UserFactory(username="charlie")
    other = ProjectFactory(owner=other_owner, slug="project-b")
    _t, raw_a = create_token(owner, name="a", project=project)
    _t, raw_b = create_token(other_owner, name="b", project=other)
    env_a = {"MLFLOW_TRACKING_URI": live_asgi.url, "MLFLOW_TRACKING_TOKEN": raw_a, "MLFLOW_EXPERIMENT_NAME": "iris"}
    assert run_task("sklearn_train", tmp_path / "train", inputs={"split": split}, **env_a).returncode == 0
    register = run_task(
        "model_register", tmp_path / "register", "--name", "stolen", inputs={"train": tmp_path / "train"},
        MLFLOW_TRACKING_URI=live_asgi.url, MLFLOW_TRACKING_TOKEN=raw_b,
    )  # fmt: skip
    assert register.returncode == 1
    assert "RESOURCE_DOES_NOT_EXIST" in register.stderr  # project A's run does not exist for project B
    assert not ModelVersion.objects.filter(registered_model__project=other).exists()


def test_a_random_forest_logs_its_train_accuracy_over_its_trees(live_asgi, split, tmp_path):
    """The experiment run's page draws a chart only for a metric with several steps (a single value is in the
    table): a forest's accuracy with its first k trees is that curve, ending at its train accuracy."""
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    train = run_task(
        "sklearn_train", tmp_path / "train", "--model", "random_forest", "--n_estimators", "12",
        inputs={"split": split}, MLFLOW_TRACKING_URI=live_asgi.url, MLFLOW_TRACKING_TOKEN=raw,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    run = Run.objects.get(run_uuid=json.loads((tmp_path / "train" / "tracking.json").read_text())["run_id"])
    points = list(run.metrics.filter(key="train_accuracy").order_by("step").values_list("step", "value"))
    assert [step for step, _value in points] == list(range(1, 13))
    assert all(0 < value <= 1 for _step, value in points)
    recorded = json.loads((tmp_path / "train" / "params.json").read_text())["train_accuracy"]
    assert points[-1][1] == pytest.approx(recorded)  # all twelve trees: the forest's own prediction
    assert run.latest_metrics.get(key="train_accuracy").value == pytest.approx(recorded)


def test_a_logistic_regression_logs_one_train_accuracy(live_asgi, split, tmp_path):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    train = run_task(
        "sklearn_train", tmp_path / "train", inputs={"split": split},
        MLFLOW_TRACKING_URI=live_asgi.url, MLFLOW_TRACKING_TOKEN=raw,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    run = Run.objects.get(run_uuid=json.loads((tmp_path / "train" / "tracking.json").read_text())["run_id"])
    assert list(run.metrics.filter(key="train_accuracy").values_list("step", flat=True)) == [0]


def test_evaluate_logs_its_metrics_to_the_training_run(live_asgi, split, tmp_path):
    """The test metrics reach the run that trained the model (beside its train accuracy), not only the log."""
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    env = {"MLFLOW_TRACKING_URI": live_asgi.url, "MLFLOW_TRACKING_TOKEN": raw}
    assert run_task("sklearn_train", tmp_path / "train", inputs={"split": split}, **env).returncode == 0
    evaluate = run_task("evaluate", tmp_path / "evaluate", inputs={"train": tmp_path / "train", "split": split}, **env)
    assert evaluate.returncode == 0, evaluate.stderr
    scores = json.loads((tmp_path / "evaluate" / "metrics.json").read_text())
    run = Run.objects.get(run_uuid=json.loads((tmp_path / "train" / "tracking.json").read_text())["run_id"])
    latest = {m.key: m.value for m in run.latest_metrics.all()}
    assert latest["test_accuracy"] == pytest.approx(scores["accuracy"])
    assert latest["test_f1_macro"] == pytest.approx(scores["f1_macro"])
    assert {p.key: p.value for p in run.params.all()}["test_rows"] == str(scores["rows"])
    assert f"logged test_accuracy and test_f1_macro to run {run.run_uuid}" in evaluate.stdout
