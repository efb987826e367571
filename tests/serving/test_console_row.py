"""The test console's "use a row from the dataset": `GET /api/v1/services/<pk>/sample-row/` answers a row of the
dataset version the served model trained on, found through lineage (service → model version → tracking run →
dataset version), one value per feature: by column name when the model names its features, else the table's first
columns in order. No lineage or a row out of range is a 400 saying why; members read it, outsiders get a 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.projects.models import Role
from tests import factories
from tests.conftest import user_client
from tests.monitoring.test_run_monitor import COLUMNS, trained_version
from tests.serving.replicas import make_service

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(world):
    _dataset_version, model_version = trained_version(world)
    service = make_service(world.project_a, "iris")
    service.model_version = model_version
    service.save(update_fields=["model_version"])
    return service


def sample(user, service, **params):
    return user_client(user).get(reverse("api:inferenceservice-sample-row", kwargs={"pk": service.pk}), params)


def test_it_answers_the_named_features_of_a_training_row(world, service):
    response = sample(world.alice, service, features="petal_width,sepal_length", index=0)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "dataset": "iris@1",
        "file": "iris.csv",
        "row": 0,
        "columns": ["petal_width", "sepal_length"],
        "values": [0.2, 5.1],
    }


def test_features_named_by_position_take_the_first_columns_in_order(world, service):
    response = sample(world.bob, service, features="x0,x1,x2,x3", index=50)
    assert response.status_code == 200, response.content
    assert response.json()["columns"] == COLUMNS
    assert response.json()["values"] == [7.0, 3.2, 4.7, 1.4]  # the first versicolor row of iris


def test_without_an_index_it_draws_some_row(world, service):
    body = sample(world.alice, service, features=",".join(COLUMNS)).json()
    assert 0 <= body["row"] < 150
    assert all(isinstance(v, float) for v in body["values"])


def test_a_row_out_of_range_is_a_400_on_index(world, service):
    response = sample(world.alice, service, features="x0", index=150)
    assert response.status_code == 400
    assert response.json() == {"index": ["Give a row between 0 and 149."]}


def test_without_lineage_it_says_why(world):
    service = make_service(world.project_a, "bare")
    service.model_version = factories.model_version(world.project_a, world.alice, model_name="nolineage")
    service.save(update_fields=["model_version"])
    response = sample(world.alice, service, features="x0")
    assert response.status_code == 400
    assert response.json() == {"dataset": ["Model version 1 records no dataset version it was trained on."]}

    unset = make_service(world.project_a, "unset")
    assert sample(world.alice, unset).json() == {"dataset": ["The service serves no registered model version."]}


def test_a_viewer_reads_it_and_an_outsider_gets_a_404(world, service):
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    assert sample(viewer, service, features="x0", index=1).status_code == 200
    assert sample(world.charlie, service, features="x0", index=1).status_code == 404
