"""A token of project A cannot read or write project B's experiments, runs, artifacts or models (404, never 403);
read-only tokens cannot write; tokens without a project name the project explicitly."""

from __future__ import annotations

import pytest

from apps.accounts.models import ApiToken
from apps.models.models import Experiment, Metric, RegisteredModel
from tests.models.conftest import api_for, assert_error


@pytest.fixture
def theirs(api_b) -> dict:
    """Project B's experiment, run, artifact and registered model."""
    experiment_id = api_b.experiment("secret")
    run = api_b.run(experiment_id)
    run_id = run["info"]["run_id"]
    root = run["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")
    assert api_b.put_artifact(f"{root}/model.pkl", b"secret bytes").status_code == 200
    assert api_b.post("registered-models/create", {"name": "secret-model"}).status_code == 200
    source = f"runs:/{run_id}/model.pkl"
    assert (
        api_b.post("model-versions/create", {"name": "secret-model", "source": source, "run_id": run_id}).status_code
        == 200
    )
    return {"experiment_id": experiment_id, "run_id": run_id, "artifact": f"{root}/model.pkl", "root": root}


@pytest.mark.smoke
def test_project_a_cannot_reach_project_b(api_a, theirs):
    run_id, experiment_id = theirs["run_id"], theirs["experiment_id"]
    calls = [
        api_a.get("experiments/get", experiment_id=experiment_id),
        api_a.post("experiments/update", {"experiment_id": experiment_id, "new_name": "mine"}),
        api_a.post("experiments/delete", {"experiment_id": experiment_id}),
        api_a.post("experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": "k", "value": "v"}),
        api_a.post("runs/create", {"experiment_id": experiment_id}),
        api_a.get("runs/get", run_id=run_id),
        api_a.post("runs/update", {"run_id": run_id, "status": "KILLED"}),
        api_a.post("runs/delete", {"run_id": run_id}),
        api_a.post("runs/log-metric", {"run_id": run_id, "key": "m", "value": 1, "timestamp": 1}),
        api_a.post("runs/log-batch", {"run_id": run_id, "params": [{"key": "p", "value": "v"}]}),
        api_a.post("runs/set-tag", {"run_id": run_id, "key": "k", "value": "v"}),
        api_a.get("metrics/get-history", run_id=run_id, metric_key="m"),
        api_a.get("artifacts/list", run_id=run_id),
        api_a.get_artifact(theirs["artifact"]),
        api_a.get_artifact("", path=theirs["root"]),
        api_a.put_artifact(theirs["artifact"], b"overwritten"),
        api_a.delete_artifact(theirs["artifact"]),
        api_a.post("logged-models", {"experiment_id": experiment_id, "name": "m"}),
    ]
    for response in calls:
        assert_error(response, 404, "RESOURCE_DOES_NOT_EXIST")
    # B's model names do not exist in A (A's namespace is its own project)
    assert_error(api_a.get("registered-models/get", name="secret-model"), 404, "RESOURCE_DOES_NOT_EXIST")
    assert_error(api_a.get("model-versions/get", name="secret-model", version="1"), 404, "RESOURCE_DOES_NOT_EXIST")
    assert_error(api_a.get("registered-models/get", name="project-b/secret-model"), 404, "RESOURCE_DOES_NOT_EXIST")

    # searching never shows them
    found = api_a.post("runs/search", {"experiment_ids": [experiment_id]}).json()
    assert found.get("runs", []) == []
    assert api_a.post("experiments/search", {}).json().get("experiments", []) == []
    assert api_a.get("registered-models/search").json().get("registered_models", []) == []
    assert api_a.get("model-versions/search").json().get("model_versions", []) == []
    assert api_a.get_artifact("", path="").json() == {"files": []}
    # and nothing changed
    assert Experiment.objects.get(pk=experiment_id).name == "secret"
    assert not Metric.objects.exists()


def test_a_version_cannot_point_at_another_projects_files(api_a, theirs):
    assert api_a.post("registered-models/create", {"name": "thief"}).status_code == 200
    for source in (f"runs:/{theirs['run_id']}/model.pkl", f"mlflow-artifacts:/{theirs['artifact']}", "/etc/passwd"):
        response = api_a.post("model-versions/create", {"name": "thief", "source": source})
        assert response.status_code in (400, 404), response.content
    assert_error(
        api_a.post("model-versions/create", {"name": "thief", "source": "runs:/x/y", "run_id": theirs["run_id"]}),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )


@pytest.mark.smoke
def test_a_read_only_token_cannot_write(world, api_a):
    experiment_id = api_a.experiment("ro")
    run_id = api_a.run(experiment_id)["info"]["run_id"]
    reader = api_for(world.alice, project=world.project_a, scope=ApiToken.Scope.READ)
    assert reader.get("runs/get", run_id=run_id).status_code == 200
    assert_error(reader.post("runs/log-metric", {"run_id": run_id, "key": "m", "value": 1, "timestamp": 1}), 403,
                 "PERMISSION_DENIED")  # fmt: skip
    assert_error(reader.post("experiments/create", {"name": "new"}), 403, "PERMISSION_DENIED")
    assert_error(reader.put_artifact(f"{experiment_id}/{run_id}/artifacts/x", b"x"), 403, "PERMISSION_DENIED")


def test_a_viewer_can_read_but_not_write(world, api_a):
    from apps.projects.models import Role
    from tests.factories import UserFactory, add_member

    viewer = UserFactory(username="viewer")
    add_member(world.project_a, viewer, Role.VIEWER)
    run_id = api_a.run(api_a.experiment("v"))["info"]["run_id"]
    api = api_for(viewer, project=world.project_a)
    assert api.get("runs/get", run_id=run_id).status_code == 200
    assert_error(api.post("runs/set-tag", {"run_id": run_id, "key": "k", "value": "v"}), 403, "PERMISSION_DENIED")


def test_a_token_without_project_names_the_project(world):
    api = api_for(world.alice)  # all of alice's projects
    error = assert_error(api.post("experiments/create", {"name": "plain"}), 400, "INVALID_PARAMETER_VALUE")
    assert "project-slug" in error["message"]
    experiment_id = api.experiment("project-a/exp")
    assert Experiment.objects.get(pk=experiment_id).project == world.project_a
    got = api.get("experiments/get-by-name", experiment_name="project-a/exp").json()["experiment"]
    assert got["name"] == "project-a/exp"
    assert_error(api.post("experiments/create", {"name": "project-b/exp"}), 404, "RESOURCE_DOES_NOT_EXIST")
    # the X-Portal-Project header works too
    response = api.client.post(
        "/api/2.0/mlflow/registered-models/create",
        data='{"name": "m"}',
        content_type="application/json",
        HTTP_X_PORTAL_PROJECT="project-a",
        **api.headers,
    )
    assert response.status_code == 200, response.content
    assert RegisteredModel.objects.get(name="m").project == world.project_a


@pytest.mark.smoke
def test_no_or_a_bad_token_is_unauthenticated(world):
    api = api_for(world.alice, project=world.project_a)
    api.headers = {}
    assert_error(api.get("experiments/get", experiment_id="1"), 401, "UNAUTHENTICATED")
    api.headers = {"HTTP_AUTHORIZATION": "Bearer nope"}
    assert_error(api.post("experiments/create", {"name": "x"}), 401, "UNAUTHENTICATED")
    assert_error(api.get_artifact("1/x"), 401, "UNAUTHENTICATED")


def test_the_session_works_on_the_ajax_api(world, client):
    api_a = api_for(world.alice, project=world.project_a)
    experiment_id = api_a.experiment("ui")
    client.force_login(world.alice)
    response = client.get("/ajax-api/2.0/mlflow/experiments/get", {"experiment_id": experiment_id})
    assert response.status_code == 200
    assert response.json()["experiment"]["name"] == "project-a/ui"
    client.force_login(world.charlie)
    assert client.get("/ajax-api/2.0/mlflow/experiments/get", {"experiment_id": experiment_id}).status_code == 404
