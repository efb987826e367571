"""The ML-backend protocol views on their own (no Label Studio needed): basic auth against the stored hash, the
answers' shapes, bad bodies → 400, events acknowledged. The end-to-end run with Label Studio is test_autolabel."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth.hashers import make_password

from apps.labeling.models import MLBackend
from apps.serving.models import InferenceService, Revision
from tests.access import make_labeling_project

pytestmark = pytest.mark.django_db


def auth(user: str, password: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def backend(world):
    labeling = make_labeling_project(world.project_a, world.alice)
    svc = InferenceService.objects.create(project=world.project_a, name="digits")
    svc.current_revision = Revision.objects.create(service=svc, number=2)
    svc.save(update_fields=["current_revision"])
    return MLBackend.objects.create(
        labeling_project=labeling, service=svc, username="portal-labeling-x", password_hash=make_password("s3cret")
    )


def test_health_and_setup_answer_with_the_right_credentials(client, backend):
    base = f"/labeling/ml/{backend.labeling_project_id}"
    good = auth("portal-labeling-x", "s3cret")
    assert client.get(f"{base}/health", **good).json() == {"status": "UP", "model_class": "digits"}
    response = client.post(f"{base}/setup", {"project": "1.2", "schema": "<View/>"}, "application/json", **good)
    assert response.json() == {"model_version": "digits@r2"}
    assert client.get(f"{base}/versions", **good).json() == {"versions": ["digits@r2"]}
    assert client.post(f"{base}/health", **good).status_code == 405


@pytest.mark.parametrize(
    "headers",
    [
        {},
        auth("portal-labeling-x", "wrong"),
        auth("other", "s3cret"),
        {"HTTP_AUTHORIZATION": "Basic %%%"},
        {"HTTP_AUTHORIZATION": "Token s3cret"},
    ],
)
def test_wrong_or_missing_basic_auth_is_401(client, backend, headers):
    base = f"/labeling/ml/{backend.labeling_project_id}"
    for response in (
        client.get(f"{base}/health", **headers),
        client.post(f"{base}/setup", {}, "application/json", **headers),
        client.post(f"{base}/predict", {"tasks": []}, "application/json", **headers),
        client.post(f"{base}/webhook", {"action": "START_TRAINING"}, "application/json", **headers),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Basic realm="portal-ml-backend"'


def test_predict_refuses_bad_bodies_and_answers_one_result_per_task(client, backend):
    url = f"/labeling/ml/{backend.labeling_project_id}/predict"
    good = auth("portal-labeling-x", "s3cret")
    assert client.post(url, "not json", "application/json", **good).status_code == 400
    assert client.post(url, [1], "application/json", **good).status_code == 400
    assert client.post(url, {"tasks": "x"}, "application/json", **good).status_code == 400
    # tasks that are not this labeling project's get an empty prediction each (the count matches, nothing leaks)
    response = client.post(url, {"tasks": [{"id": 987654}, {"id": "x"}]}, "application/json", **good)
    assert response.status_code == 200
    assert response.json()["results"] == [{"result": [], "score": 0.0, "model_version": "digits@r2"}] * 2


def test_webhook_events_are_acknowledged(client, backend, django_capture_on_commit_callbacks):
    url = f"/labeling/ml/{backend.labeling_project_id}/webhook"
    good = auth("portal-labeling-x", "s3cret")
    response = client.post(url, {"action": "START_TRAINING", "project": {"id": 1}}, "application/json", **good)
    assert response.json() == {"status": "ignored", "detail": "no training pipeline chosen in the portal"}
    response = client.post(url, {"action": "ANNOTATION_CREATED"}, "application/json", **good)
    assert response.json() == {"status": "queued"}
