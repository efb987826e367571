"""Each built-in app that trains and serves, installed into a fresh project and driven to ready with real parts: a
local agent runs its pipeline, the alias the pipeline sets deploys its service, and the service answers."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.appstore.services import install
from apps.jobs.services import start_run
from apps.serving.models import InferenceService
from apps.serving.tasks import follow_alias
from tests.appstore.factories import builtin_version
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import drive as drive_run
from tests.serving.factories import artifact_store, fast_serving, post_json, ready_replicas  # noqa: F401 (fixtures)
from tests.serving.factories import drive as drive_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# app → (a row of inputs, what the service must answer for it)
READY = {
    "regression": (
        [0.038076, 0.05068, 0.061696, 0.021872, -0.044223, -0.034821, -0.043401, -0.002592, 0.019907, -0.017646],
        lambda predicted: 100 < predicted[0] < 300,  # a year's progression on the data's scale (25–346)
    ),
    "anomaly-detection": ([50.0, 1.2], lambda predicted: predicted == [1]),  # a normal reading
    # the last twelve months of the shipped series: the next one continues trend and season (about 416)
    "forecasting": (
        [398.8, 410.3, 443.1, 451.2, 438.2, 423.9, 406.0, 382.6, 382.0, 368.2, 378.1, 389.7],
        lambda predicted: 380 < predicted[0] < 460,
    ),
}


@pytest.mark.usefixtures("artifact_store", "fast_serving")
@pytest.mark.parametrize("app", sorted(READY))
def test_the_app_installs_into_a_fresh_project_and_serves(app, api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version(app), project, owner)
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")

    run = drive_run(start_run(pipeline, owner), timeout=300)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    follow_alias(model.versions.get().registered_model_id, "staging")  # what the worker does once the alias moved
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    row, expected = READY[app]
    body = {"inputs": [{"name": "input-0", "shape": [1, len(row)], "datatype": "FP64", "data": row}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", body)
    assert status == 200, answer
    predicted = next(o["data"] for o in answer["outputs"] if o["name"] == "predict")
    assert expected(predicted), predicted


@pytest.mark.usefixtures("artifact_store", "fast_serving")
def test_the_text_app_serves_a_text_model_and_its_try_it_form_is_a_text_box(api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version("text-classification"), project, owner)
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")

    run = drive_run(start_run(pipeline, owner), timeout=300)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    follow_alias(model.versions.get().registered_model_id, "staging")
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    texts = ["Strong winds and heavy rain tonight.", "Bake the bread in a hot oven.", "A late goal won the match."]
    body = {"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": texts}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", body)
    assert status == 200, answer
    assert next(o["data"] for o in answer["outputs"] if o["name"] == "predict") == ["weather", "cooking", "sport"]

    client = Client()
    client.force_login(owner)
    url = reverse("appstore:installation-try", kwargs={"project": "fresh", "pk": installation.pk})
    page = client.get(url).content.decode()
    assert '<textarea name="text"' in page
    answer = client.post(url, {"text": "Simmer the soup and stir in the garlic."}).content.decode()
    assert "Prediction: <strong>cooking</strong>" in answer
    assert "invalid-feedback" in client.post(url, {"text": "  "}).content.decode()  # required
