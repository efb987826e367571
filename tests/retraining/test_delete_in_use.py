"""Deleting a dataset or a registered model that a retrain policy (or a data monitor) uses is refused, naming the
policy, on the pages and in the API (409, as other in-use deletes); the policy is kept. Deleting the project still
deletes everything in it."""

from __future__ import annotations

import pytest

from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline
from apps.models.models import RegisteredModel
from apps.projects.services import delete_project
from apps.retraining.models import RetrainPolicy
from apps.retraining.services import create_monitor, delete_policy
from tests.conftest import user_client
from tests.factories import dataset
from tests.models.conftest import api_for, assert_error
from tests.retraining.factories import policy

pytestmark = pytest.mark.django_db


def test_deleting_a_dataset_a_policy_uses_is_a_409_naming_it(world):
    rule = policy(world.project_a, world.alice)
    api = user_client(world.bob)

    response = api.delete(f"/api/v1/datasets/{rule.dataset_id}/")

    assert response.status_code == 409, response.content
    assert "iris-retrain" in response.json()["detail"]
    assert response.json()["blocked_by"] == ["retrain policy “iris-retrain”"]
    assert RetrainPolicy.objects.filter(pk=rule.pk).exists()
    delete_policy(rule)
    assert api.delete(f"/api/v1/datasets/{rule.dataset_id}/").status_code == 200
    assert not Dataset.objects.filter(pk=rule.dataset_id).exists()


def test_deleting_a_dataset_a_data_monitor_watches_is_a_409_naming_it(world):
    rule = policy(world.project_a, world.alice)
    watched = dataset(world.project_a, world.alice, name="iris-new")
    create_monitor(world.project_a, world.alice, name="iris-watch", dataset=watched, policy=rule)

    response = user_client(world.bob).delete(f"/api/v1/datasets/{watched.pk}/")

    assert response.status_code == 409, response.content
    assert response.json()["blocked_by"] == ["data monitor “iris-watch”"]
    assert Dataset.objects.filter(pk=watched.pk).exists()


def test_the_dataset_page_says_which_policy_uses_it(world, client):
    rule = policy(world.project_a, world.alice)
    client.force_login(world.bob)
    url = f"/p/{world.project_a.slug}/datasets/{rule.dataset_id}/"

    response = client.post(url + "delete/", follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == url
    assert "iris-retrain" in response.content.decode()
    assert Dataset.objects.filter(pk=rule.dataset_id).exists()
    assert RetrainPolicy.objects.filter(pk=rule.pk).exists()


def test_deleting_a_registered_model_a_policy_uses_is_a_409_naming_it(world):
    rule = policy(world.project_a, world.alice)
    api = user_client(world.bob)

    response = api.delete(f"/api/v1/registered-models/{rule.registered_model_id}/")

    assert response.status_code == 409, response.content
    assert response.json()["blocked_by"] == ["retrain policy “iris-retrain”"]
    assert RetrainPolicy.objects.filter(pk=rule.pk).exists()
    delete_policy(rule)
    assert api.delete(f"/api/v1/registered-models/{rule.registered_model_id}/").status_code == 204
    assert not RegisteredModel.objects.filter(pk=rule.registered_model_id).exists()


def test_the_mlflow_api_answers_resource_conflict_naming_the_policy(world):
    rule = policy(world.project_a, world.alice)

    response = api_for(world.alice, project=world.project_a).delete(
        "registered-models/delete", {"name": rule.registered_model.name}
    )

    assert "iris-retrain" in assert_error(response, 409, "RESOURCE_CONFLICT")["message"]
    assert RegisteredModel.objects.filter(pk=rule.registered_model_id).exists()


def test_deleting_the_project_deletes_its_policies_with_their_dataset_model_and_pipeline(world):
    rule = policy(world.project_a, world.alice)

    delete_project(world.project_a)

    assert not RetrainPolicy.objects.filter(pk=rule.pk).exists()
    assert not Dataset.objects.filter(pk=rule.dataset_id).exists()


def test_deleting_a_pipeline_a_policy_runs_is_refused_naming_it(world, client):
    rule = policy(world.project_a, world.alice)
    client.force_login(world.bob)
    url = f"/p/{world.project_a.slug}/pipelines/{rule.pipeline_id}/"

    page = client.post(url + "delete/", follow=True)
    response = user_client(world.bob).delete(f"/api/v1/pipelines/{rule.pipeline_id}/")

    assert "iris-retrain" in page.content.decode()
    assert response.status_code == 409
    assert response.json()["blocked_by"] == ["retrain policy “iris-retrain”"]
    assert Pipeline.objects.filter(pk=rule.pipeline_id).exists()
