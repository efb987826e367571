"""The official `mlflow` client (pinned, its own venv) against the real ASGI server, unchanged."""

from __future__ import annotations

import pytest

from apps.models.models import Experiment, LoggedModel, ModelVersion, Run
from tests.factories import make_token
from tests.models.conftest import OLDER_CLIENT_PYTHON, run_client

pytestmark = pytest.mark.live


def test_the_official_client_tracks_registers_and_loads_a_model(world, live_asgi):
    token = make_token(world.alice, project=world.project_a)
    out = run_client("flow.py", live_asgi.url, token, "flow")

    experiment = Experiment.objects.get(pk=out["experiment_id"])
    assert experiment.project == world.project_a
    assert experiment.name == out["experiment_name"] == "flow"

    assert out["params"] == {"alpha": "0.5", "beta": "b", "gamma": "3", "p_batch": "1"}
    assert out["metrics"]["loss"] == pytest.approx(0.2)
    assert out["metrics"]["acc"] == pytest.approx(0.9)
    assert out["metrics"]["batch_m"] == 9.0
    assert out["tags"] == {"team": "vision", "stage": "dev", "t_batch": "x"}
    assert out["status"] == "FINISHED"
    assert out["run_name"] == "first"
    assert out["history"] == [[s, pytest.approx(1 / (s + 1))] for s in range(5)]

    assert out["search_acc"] == ["first"]
    assert out["search_like"] == ["first"]
    assert out["search_order"][:2] == ["second", "first"]  # acc 0.5 < 0.9; runs without acc come last
    assert out["search_many"] == ["first"]
    assert "first" in out["search_percent"]
    assert out["search_too_many"] == "INVALID_PARAMETER_VALUE"

    assert out["root_artifacts"] == [["a.txt", False], ["data", True], ["notes", True]]
    assert out["data_artifacts"] == [["data/sub", True], ["data/table.csv", False]]
    assert out["downloaded"] == ["sub/b.txt", "table.csv"]
    assert out["nested"] == "nested"

    assert {"C", "max_iter"} <= set(out["autolog_params"])
    assert any(m.startswith("training_") for m in out["autolog_metrics"])

    assert out["version"] == "1"
    assert out["version_status"] == "READY"
    assert out["alias_version"] == "1"
    assert out["predictions"] == out["expected"]

    version = ModelVersion.objects.get(registered_model__name="iris-clf", version=1)
    assert version.registered_model.project == world.project_a
    assert version.run == Run.objects.get(name="model")
    assert "## Intended use" in version.model_card
    assert "## Limitations" in version.model_card
    assert LoggedModel.objects.filter(experiment=experiment, name="model").exists()


def test_an_older_client_of_the_mlflow_2_line_does_the_same_flow(world, live_asgi):
    """MLflow 2 differs where it matters here: log_model takes an artifact path and records no logged model
    (no /logged-models calls); everything else, registry and pyfunc loading included, is the same."""
    token = make_token(world.alice, project=world.project_a)
    out = run_client("flow.py", live_asgi.url, token, "flow2", python=OLDER_CLIENT_PYTHON)

    assert out["client_version"].startswith("2.")
    experiment = Experiment.objects.get(pk=out["experiment_id"])
    assert (experiment.project, experiment.name) == (world.project_a, "flow2")
    assert out["params"] == {"alpha": "0.5", "beta": "b", "gamma": "3", "p_batch": "1"}
    assert out["history"] == [[s, pytest.approx(1 / (s + 1))] for s in range(5)]
    assert out["search_acc"] == ["first"]
    assert out["downloaded"] == ["sub/b.txt", "table.csv"]
    assert (out["version"], out["version_status"], out["alias_version"]) == ("1", "READY", "1")
    assert out["predictions"] == out["expected"]
    assert not LoggedModel.objects.filter(experiment=experiment).exists()
