"""The MLflow API's door (apps/models/mlflow_api/base.py `request_data`): what no column or stack takes is refused
with INVALID_PARAMETER_VALUE naming the parameter, never a 500 (issue 27's reproductions, each against the endpoint
where it was found). tests/portal/test_hostile_input.py sweeps every route the same way."""

from __future__ import annotations

import json

import pytest

from apps.models.models import Experiment, Param, RegisteredModel, Run, RunTag
from tests.factories import experiment, tracking_run
from tests.models.conftest import api_for

HOSTILE = [pytest.param("\x00", "NUL", id="nul"), pytest.param("\ud800", "lone surrogates", id="surrogate")]


@pytest.fixture
def alice(world):
    return api_for(world.alice)


@pytest.fixture
def run(world):
    return tracking_run(world.project_a, world.alice)


def assert_refused(response, parameter: str, named: str) -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error_code"] == "INVALID_PARAMETER_VALUE"
    assert f"parameter '{parameter}'" in body["message"]
    assert named in body["message"]


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_log_parameter(alice, run, char, named):
    response = alice.post("runs/log-parameter", {"run_id": run.run_uuid, "key": "lr", "value": f"0.1{char}"})

    assert_refused(response, "value", named)
    assert not Param.objects.filter(run=run).exists()


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_set_tag(alice, run, char, named):
    response = alice.post("runs/set-tag", {"run_id": run.run_uuid, "key": f"k{char}", "value": "v"})

    assert_refused(response, "key", named)
    assert not RunTag.objects.filter(run=run, key__startswith="k").exists()


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_create_experiment_name_and_tags(alice, world, char, named):
    by_name = alice.post("experiments/create", {"name": f"exp{char}"})
    by_tag = alice.post("experiments/create", {"name": "fine", "tags": [{"key": "k", "value": f"v{char}"}]})

    assert_refused(by_name, "name", named)
    assert_refused(by_tag, "tags.0.value", named)
    assert not Experiment.objects.filter(name__startswith="exp").exists()
    assert not Experiment.objects.filter(name="fine").exists()


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_create_run_name(alice, world, char, named):
    exp = experiment(world.project_a)

    response = alice.post("runs/create", {"experiment_id": str(exp.pk), "run_name": f"r{char}"})

    assert_refused(response, "run_name", named)
    assert not Run.objects.exists()


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_create_registered_model(alice, char, named):
    response = alice.post("registered-models/create", {"name": f"model{char}"})

    assert_refused(response, "name", named)
    assert not RegisteredModel.objects.exists()


@pytest.mark.parametrize(("char", "named"), HOSTILE)
def test_search_filters(alice, world, char, named):
    exp = experiment(world.project_a)

    runs = alice.post("runs/search", {"experiment_ids": [str(exp.pk)], "filter": f"params.lr = '{char}'"})
    models = alice.post("registered-models/search", {"filter": f"name = 'x{char}'"})

    assert_refused(runs, "filter", named)
    assert_refused(models, "filter", named)


def test_a_nul_in_a_query_string_filter_is_refused(alice):
    """A query string cannot carry a lone surrogate (Django decodes it with replacement), but a NUL it can."""
    response = alice.get("registered-models/search", filter="name = 'x\x00'")

    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_a_log_batch_nested_50000_deep_is_a_400_not_a_recursion_error(alice, run):
    body = '{"run_id": "' + run.run_uuid + '", "metrics": ' + "[" * 50_000 + "]" * 50_000 + "}"

    response = alice.post("runs/log-batch", body)

    assert response.status_code == 400, response.content
    assert response.json() == {
        "error_code": "INVALID_PARAMETER_VALUE",
        "message": "Malformed request: Nested deeper than 100 levels.",
    }


def test_a_log_batch_nested_past_the_limit_but_not_past_python_is_refused_naming_the_field(alice, run):
    body = {"run_id": run.run_uuid, "params": [{"key": "k", "value": "v"}], "tags": json.loads("[" * 150 + "]" * 150)}

    response = alice.post("runs/log-batch", body)

    assert response.status_code == 400
    assert "parameter 'tags" in response.json()["message"]
    assert "Nested deeper than 100 levels." in response.json()["message"]
    assert not Param.objects.filter(run=run).exists()


@pytest.mark.parametrize("name", ["filter", "page_token"])
def test_a_number_where_mlflow_has_a_string_is_a_400(alice, world, name):
    exp = experiment(world.project_a)

    response = alice.post("runs/search", {"experiment_ids": [str(exp.pk)], name: 2**64})

    assert response.status_code == 400
    assert f"parameter '{name}'" in response.json()["message"]


def test_a_metric_value_past_a_double_is_a_400(alice, run):
    body = {"run_id": run.run_uuid, "key": "m", "value": 10**400, "timestamp": 1, "step": 0}

    response = alice.post("runs/log-metric", body)

    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_a_user_id_longer_than_its_column_is_a_400(alice, world):
    exp = experiment(world.project_a)

    response = alice.post("runs/create", {"experiment_id": str(exp.pk), "user_id": "u" * 251})

    assert response.status_code == 400
    assert "user_id" in response.json()["message"]
    assert not Run.objects.exists()


def test_an_experiment_id_past_64_bits_in_a_search_is_a_400(alice):
    response = alice.post("runs/search", {"experiment_ids": [str(2**64)]})

    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_a_model_json_nested_past_the_limit_is_a_400(alice, run):
    model_json = "[" * 50_000 + "]" * 50_000  # a string parameter holding JSON, decoded by the handler

    response = alice.post("runs/log-model", {"run_id": run.run_uuid, "model_json": model_json})

    assert response.status_code == 400
    assert response.json()["message"].startswith("Invalid value for parameter 'model_json': Nested deeper")


def test_a_nul_in_the_url_path_is_a_400(alice):
    """`logged-models/{model_id}` takes any segment: a NUL in it reached the database filter."""
    response = alice.client.get("/api/2.0/mlflow/logged-models/m-1%00x", **alice.headers)

    assert response.status_code == 400
    assert response.json() == {
        "error_code": "INVALID_PARAMETER_VALUE",
        "message": "url: Text may not contain NUL (\\u0000) characters.",
    }
