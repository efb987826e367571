"""Registered models, versions, aliases, stages and MLflow 3 logged models through the MLflow API."""

from __future__ import annotations

import pytest

from apps.models.metrics import encode_token
from apps.models.models import ModelVersion
from tests.models.conftest import assert_error


@pytest.fixture
def run_id(api_a) -> str:
    run = api_a.run(api_a.experiment("reg"))
    root = run["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")
    api_a.put_artifact(f"{root}/model/MLmodel", b"flavors: {}")
    return run["info"]["run_id"]


def experiment_of(api, run_id: str) -> str:
    return api.get("runs/get", run_id=run_id).json()["run"]["info"]["experiment_id"]


@pytest.mark.smoke
def test_versions_aliases_and_stages(api_a, run_id):
    created = api_a.post(
        "registered-models/create", {"name": "clf", "description": "d", "tags": [{"key": "k", "value": "v"}]}
    )
    assert created.status_code == 200, created.content
    assert created.json()["registered_model"]["name"] == "clf"
    assert_error(api_a.post("registered-models/create", {"name": "clf"}), 400, "RESOURCE_ALREADY_EXISTS")

    for expected in ("1", "2"):
        response = api_a.post(
            "model-versions/create", {"name": "clf", "source": f"runs:/{run_id}/model", "run_id": run_id}
        )
        version = response.json()["model_version"]
        assert (version["version"], version["status"], version["run_id"]) == (expected, "READY", run_id)
        assert version["source"] == f"mlflow-artifacts:/{experiment_of(api_a, run_id)}/{run_id}/artifacts/model"

    assert (
        api_a.post("registered-models/alias", {"name": "clf", "alias": "production", "version": "1"}).status_code == 200
    )
    by_alias = api_a.get("registered-models/alias", name="clf", alias="production").json()["model_version"]
    assert (by_alias["version"], by_alias["aliases"]) == ("1", ["production"])
    assert (
        api_a.post("registered-models/alias", {"name": "clf", "alias": "production", "version": "2"}).status_code == 200
    )
    assert (
        api_a.get("registered-models/alias", name="clf", alias="production").json()["model_version"]["version"] == "2"
    )
    assert_error(api_a.post("registered-models/alias", {"name": "clf", "alias": "v3", "version": "1"}), 400,
                 "INVALID_PARAMETER_VALUE")  # fmt: skip
    assert_error(api_a.post("registered-models/alias", {"name": "clf", "alias": "x", "version": "9"}), 404,
                 "RESOURCE_DOES_NOT_EXIST")  # fmt: skip
    assert api_a.delete("registered-models/alias", {"name": "clf", "alias": "production"}).status_code == 200
    # a missing alias is INVALID_PARAMETER_VALUE, as MLflow's server answers; `latest` is the highest version
    assert_error(api_a.get("registered-models/alias", name="clf", alias="production"), 400, "INVALID_PARAMETER_VALUE")
    latest = api_a.get("registered-models/alias", name="clf", alias="latest").json()["model_version"]
    assert latest["version"] == str(ModelVersion.objects.filter(registered_model__name="clf").latest("version").version)

    staged = api_a.post("model-versions/transition-stage", {"name": "clf", "version": "1", "stage": "production",
                                                            "archive_existing_versions": False})  # fmt: skip
    assert staged.json()["model_version"]["current_stage"] == "Production"
    latest = api_a.post("registered-models/get-latest-versions", {"name": "clf", "stages": ["Production"]}).json()
    assert [v["version"] for v in latest["model_versions"]] == ["1"]

    got = api_a.get("registered-models/get", name="clf").json()["registered_model"]
    assert {v["version"] for v in got["latest_versions"]} == {"1", "2"}
    assert got["tags"] == [{"key": "k", "value": "v"}]
    assert (
        api_a.get("model-versions/get-download-uri", name="clf", version="2").json()["artifact_uri"].endswith("/model")
    )

    found = api_a.get("model-versions/search", filter=f"run_id = '{run_id}'").json()["model_versions"]
    assert sorted(v["version"] for v in found) == ["1", "2"]
    assert [
        m["name"] for m in api_a.get("registered-models/search", filter="name LIKE 'cl%'").json()["registered_models"]
    ] == ["clf"]

    card = ModelVersion.objects.get(version=1).model_card
    assert all(f"## {section}" in card for section in ("Intended use", "Metrics", "Data", "Limitations"))

    assert api_a.delete("model-versions/delete", {"name": "clf", "version": "2"}).status_code == 200
    assert_error(api_a.get("model-versions/get", name="clf", version="2"), 404, "RESOURCE_DOES_NOT_EXIST")
    assert_error(api_a.get("model-versions/get", name="clf", version="two"), 400, "INVALID_PARAMETER_VALUE")
    assert api_a.post("registered-models/rename", {"name": "clf", "new_name": "clf2"}).status_code == 200
    assert api_a.delete("registered-models/delete", {"name": "clf2"}).status_code == 200
    assert_error(api_a.get("registered-models/get", name="clf2"), 404, "RESOURCE_DOES_NOT_EXIST")


def test_logged_models(api_a, run_id):
    experiment_id = api_a.get("runs/get", run_id=run_id).json()["run"]["info"]["experiment_id"]
    created = api_a.post("logged-models", {"experiment_id": experiment_id, "name": "model", "source_run_id": run_id,
                                           "params": [{"key": "C", "value": "1"}]}).json()["model"]  # fmt: skip
    model_id = created["info"]["model_id"]
    assert created["info"]["status"] == "LOGGED_MODEL_PENDING"
    assert created["info"]["artifact_uri"] == f"mlflow-artifacts:/{experiment_id}/models/{model_id}/artifacts"
    assert (
        api_a.patch(f"logged-models/{model_id}", {"model_id": model_id, "status": "LOGGED_MODEL_READY"}).status_code
        == 200
    )
    assert api_a.patch(f"logged-models/{model_id}/tags", {"tags": [{"key": "a", "value": "b"}]}).status_code == 200
    got = api_a.get(f"logged-models/{model_id}").json()["model"]
    assert got["info"]["status"] == "LOGGED_MODEL_READY"
    assert got["info"]["tags"] == [{"key": "a", "value": "b"}]
    assert got["info"]["source_run_id"] == run_id
    assert got["data"]["params"] == [{"key": "C", "value": "1"}]
    found = api_a.post("logged-models/search", {"experiment_ids": [experiment_id], "filter": "name = 'model'"}).json()
    assert [m["info"]["model_id"] for m in found["models"]] == [model_id]
    assert api_a.post("registered-models/create", {"name": "lm"}).status_code == 200
    version = api_a.post("model-versions/create", {"name": "lm", "source": f"models:/{model_id}"}).json()[
        "model_version"
    ]
    assert version["model_id"] == model_id
    assert_error(api_a.get("logged-models/m-" + "0" * 32), 404, "RESOURCE_DOES_NOT_EXIST")


def test_unknown_endpoints_answer_in_mlflow_shape(api_a):
    assert_error(api_a.get("no/such/thing"), 404, "ENDPOINT_NOT_FOUND")
    assert_error(api_a.get("runs/create"), 404, "ENDPOINT_NOT_FOUND")


def test_registered_model_search_takes_many_tag_clauses_and_refuses_negative_offsets(api_a):
    for name, stage in (("clf", "prod"), ("reg", "dev")):
        api_a.post("registered-models/create", {"name": name, "tags": [{"key": "stage", "value": stage}]})
    many = " AND ".join(["tags.stage LIKE 'pr%'", "tags.stage != 'dev'", "tags.nothing IS NULL", "name != 'x'"] * 100)

    found = api_a.get("registered-models/search", filter=many).json()["registered_models"]

    assert [m["name"] for m in found] == ["clf"]
    token = encode_token({"offset": -1})
    assert_error(api_a.get("registered-models/search", page_token=token), 400, "INVALID_PARAMETER_VALUE")
