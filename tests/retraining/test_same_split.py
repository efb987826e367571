"""The same-split comparison with real parts: the built-in tasks against the portal's live MLflow-compatible API with a
project token. The evaluate step fetches the champion at the policy's alias from the registry (inside the task, not
the portal), scores it on the new model's test split and logs champion_test_accuracy to the challenger's run; the gate
then compares on that basis and says so on the decision, the decisions page and the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

from apps.accounts.services import create_token
from apps.models.models import ModelVersion, Run
from apps.retraining import gate
from apps.retraining.models import PromotionDecision
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.test_builtin_tasks import run_task
from tests.retraining.factories import policy

pytestmark = [pytest.mark.live]


def test_the_evaluate_step_scores_the_champion_on_its_split_and_the_gate_compares_on_it(live_asgi, tmp_path: Path):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    _token, raw = create_token(owner, name="task", project=project)
    env = {"MLFLOW_TRACKING_URI": live_asgi.url, "MLFLOW_TRACKING_TOKEN": raw, "MLFLOW_EXPERIMENT_NAME": "iris"}
    assert run_task("iris_load", tmp_path / "iris").returncode == 0
    for name, seed in (("old", "1"), ("new", "2")):  # two splits: each model has its own test rows
        done = run_task("split", tmp_path / f"split-{name}", "--seed", seed, inputs={"iris": tmp_path / "iris"})
        assert done.returncode == 0, done.stderr

    old = run_task("sklearn_train", tmp_path / "train-old", "--max_iter", "1",
                   inputs={"split": tmp_path / "split-old"}, **env)  # fmt: skip
    assert old.returncode == 0, old.stderr
    own = run_task("evaluate", tmp_path / "eval-old", inputs={"train": tmp_path / "train-old",
                                                              "split": tmp_path / "split-old"}, **env)  # fmt: skip
    assert own.returncode == 0, own.stderr
    registered = run_task("model_register", tmp_path / "reg-old", "--name", "iris-classifier", "--alias", "production",
                          inputs={"train": tmp_path / "train-old"}, **env)  # fmt: skip
    assert registered.returncode == 0, registered.stderr

    new = run_task("sklearn_train", tmp_path / "train-new", inputs={"split": tmp_path / "split-new"}, **env)
    assert new.returncode == 0, new.stderr
    evaluated = run_task(
        "evaluate", tmp_path / "eval-new", "--champion", "models:/iris-classifier@production",
        inputs={"train": tmp_path / "train-new", "split": tmp_path / "split-new"}, **env,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert "downloading the champion iris-classifier version 1" in evaluated.stdout
    scores = json.loads((tmp_path / "eval-new" / "metrics.json").read_text())
    assert (scores["champion"]["version"], scores["champion"]["rows"]) == (1, scores["rows"])
    new_run = Run.objects.get(run_uuid=json.loads((tmp_path / "train-new" / "tracking.json").read_text())["run_id"])
    latest = {m.key: m.value for m in new_run.latest_metrics.all()}
    assert latest["test_accuracy"] == pytest.approx(scores["accuracy"])
    assert latest["champion_test_accuracy"] == pytest.approx(scores["champion"]["accuracy"])
    assert latest["champion_test_f1_macro"] == pytest.approx(scores["champion"]["f1_macro"])
    assert latest["champion_version"] == 1

    assert run_task("model_register", tmp_path / "reg-new", "--name", "iris-classifier", "--alias", "challenger",
                    inputs={"train": tmp_path / "train-new"}, **env).returncode == 0  # fmt: skip
    challenger = ModelVersion.objects.get(registered_model__project=project, version=2)
    champion = ModelVersion.objects.get(registered_model__project=project, version=1)
    decision = gate.decide(policy(project, owner, margin=0.0), challenger)

    assert (decision.champion, decision.basis) == (champion, PromotionDecision.Basis.SAME_SPLIT)
    assert decision.champion_value == pytest.approx(scores["champion"]["accuracy"])
    assert "Both scored on the challenger's test split." in decision.message
    browser = Client()
    browser.force_login(owner)
    api = browser.get(f"/api/v1/promotion-decisions/{decision.pk}/").json()
    assert (api["basis"], api["champion_value"]) == ("same_split", decision.champion_value)
    html = browser.get(f"/p/{project.slug}/retraining/decisions/").content.decode()
    assert 'data-basis="same_split"' in html
