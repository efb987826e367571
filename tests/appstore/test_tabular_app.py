"""The built-in tabular classification app installed into a fresh project and driven to ready with real parts: a
local agent runs the pipeline (load → split → train → evaluate → register), the alias it sets deploys the service,
and the service's model server answers a prediction."""

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
from tests.serving.factories import (  # noqa: F401 (fixtures)
    artifact_store,
    fast_serving,
    infer_body,
    post_json,
    predictions,
    ready_replicas,
)
from tests.serving.factories import drive as drive_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.mark.usefixtures("artifact_store", "fast_serving")
def test_the_tabular_app_installs_into_a_fresh_project_and_serves_its_model(api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version(), project, owner, name="flowers")
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")

    run = drive_run(start_run(pipeline, owner), timeout=300)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    version = model.versions.get()
    assert [a.alias for a in version.aliases.all()] == ["staging"]
    follow_alias(model.pk, "staging")  # what the worker does once the alias moved
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    status, body = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", infer_body())
    assert status == 200, body
    assert predictions(body) == ["setosa", "virginica", "versicolor"]

    # "Try it": a form from the model's signature (the training columns by name), answered by the service.
    client = Client()
    client.force_login(owner)
    url = reverse("appstore:installation-try", kwargs={"project": "fresh", "pk": installation.pk})
    page = client.get(url).content.decode()
    for column in ("sepal_length", "sepal_width", "petal_length", "petal_width"):
        assert f'name="{column}"' in page
    answer = client.post(
        url, {"sepal_length": "6.7", "sepal_width": "3.0", "petal_length": "5.2", "petal_width": "2.3"}
    )
    assert "Prediction: <strong>virginica</strong>" in answer.content.decode()
    assert client.post(url, {"sepal_length": "x"}).content.decode().count("invalid-feedback") == 4
