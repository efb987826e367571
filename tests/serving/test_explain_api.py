"""Explanations of a service's predictions through the portal: `POST /api/v1/services/<pk>/explain/` (what the test
console's "Explain" calls) forwards to a real model-server replica and adds rows of the dataset the model was
trained on as the background; the router's `/serving/<p>/<s>/v2/models/<m>/explain` passes the caller's request
through with infer's auth. Members get SHAP values that add up to the output, bad requests a 400 saying why, an
outsider a 404, a service with no ready replica a 503."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from django.urls import reverse

from apps.serving.models import InferenceService, Replica
from apps.serving.router.asgi import invalidate
from tests.conftest import user_client
from tests.factories import make_token
from tests.monitoring.test_run_monitor import trained_version
from tests.serving.replicas import ModelServer, add_revision, infer_body, iris_model, make_service


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ModelServer]:
    replica = ModelServer(iris_model(tmp_path_factory.mktemp("iris"))).start()
    yield replica
    replica.stop()


def serving(project, server: ModelServer, model_version=None) -> InferenceService:
    service = make_service(project, "iris")
    service.model_version = model_version
    service.current_revision = add_revision(service, 1, server)
    service.save()
    invalidate()
    return service


def explain(user, service: InferenceService, body) -> tuple[int, dict]:
    url = reverse("api:inferenceservice-explain", kwargs={"pk": service.pk})
    response = user_client(user).post(url, body, format="json")
    return response.status_code, response.json()


def assert_additive(document: dict) -> None:
    for row in document["rows"]:
        total = np.array(row["base_value"]) + np.array(row["contributions"]).sum(axis=0)
        np.testing.assert_allclose(total, row["output"], atol=1e-9)


@pytest.mark.django_db
class TestServiceApi:
    def test_one_row_is_explained_against_the_training_data(self, world, server):
        _dataset, version = trained_version(world)
        service = serving(world.project_a, server, version)
        code, document = explain(world.bob, service, infer_body([[5.1, 3.5, 1.4, 0.2]]))
        assert code == 200, document
        assert document["background"] == {"rows": 50, "source": "parameters", "dataset": "iris@1"}
        assert document["method"] == "shapley-exact"
        assert document["predict"] == [0]
        assert_additive(document)

    def test_a_background_of_the_callers_own_is_kept(self, world, server):
        _dataset, version = trained_version(world)
        service = serving(world.project_a, server, version)
        body = {**infer_body(), "parameters": {"background": [[5.0, 3.4, 1.5, 0.2], [6.5, 3.0, 5.5, 1.8]]}}
        code, document = explain(world.alice, service, body)
        assert code == 200, document
        assert document["background"] == {"rows": 2, "source": "parameters"}
        assert_additive(document)

    def test_without_lineage_one_row_is_a_400_saying_what_is_missing(self, world, server):
        service = serving(world.project_a, server)
        code, document = explain(world.alice, service, infer_body([[5.1, 3.5, 1.4, 0.2]]))
        assert code == 400
        assert "needs a background" in document["error"]
        code, document = explain(world.alice, service, infer_body())  # several rows: against each other
        assert code == 200, document
        assert document["background"]["source"] == "request"

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ({"inputs": "rows"}, "'inputs' list"),
            ([1, 2], "'inputs' list"),
            ({**infer_body(), "parameters": "x"}, "'parameters' must be an object"),
            (infer_body([[1.0, 2.0, 3.0]]), "3 features per row, the model takes 4"),
        ],
    )
    def test_bad_requests_are_400_saying_why(self, world, server, body, message):
        _dataset, version = trained_version(world)
        service = serving(world.project_a, server, version)
        code, document = explain(world.alice, service, body)
        assert code == 400, document
        assert message in document["error"]

    def test_an_outsider_gets_a_404(self, world, server):
        service = serving(world.project_a, server)
        code, _document = explain(world.charlie, service, infer_body())
        assert code == 404

    def test_no_ready_replica_is_a_503_saying_so(self, world, server):
        service = serving(world.project_a, server)
        Replica.objects.filter(revision__service=service).update(status=Replica.Status.STOPPED)
        code, document = explain(world.alice, service, infer_body())
        assert code == 503
        assert "No replica is ready" in document["error"]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_router_passes_explain_through_with_infers_auth(world, server, live_asgi):
    service = serving(world.project_a, server)
    path = f"/serving/project-a/{service.name}/v2/models/iris/explain"
    with httpx.Client(base_url=live_asgi.url, timeout=30) as client:
        alice = {"Authorization": f"Bearer {make_token(world.alice)}"}
        response = client.post(path, json=infer_body(), headers=alice)
        assert response.status_code == 200, response.text
        assert response.headers["x-portal-revision"] == "1"
        assert_additive(response.json())
        bad = client.post(path, json=infer_body([[5.1, 3.5, 1.4, 0.2]]), headers=alice)
        assert bad.status_code == 400
        assert "needs a background" in bad.json()["error"]
        charlie = {"Authorization": f"Bearer {make_token(world.charlie)}"}
        outsider = client.post(path, json=infer_body(), headers=charlie)
        assert outsider.status_code == 404
        assert client.post(path, json=infer_body()).status_code == 401
        assert client.get(f"/serving/project-a/{service.name}/", headers=alice).json()["explanation"] == (
            f"/serving/project-a/{service.name}/v2/models/<model>/explain"
        )
