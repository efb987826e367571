"""Auto-labeling against the session's real Label Studio and a real model-server process serving a scikit-learn
digits classifier: attaching the service registers the portal as Label Studio's ML backend (Label Studio calls
/health and /setup over HTTP with basic auth), "pre-annotate all" stores one prediction per task in Label Studio,
and "uncertain first" orders by score. The portal runs as pytest-django's live server so Label Studio can reach it.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Iterator

import joblib
import numpy as np
import pytest
from django.contrib.auth.hashers import identify_hasher
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from apps.labeling import server, services
from apps.labeling.models import LabelingTask, MLBackend
from apps.serving.models import InferenceService, Replica, Revision
from tests import factories
from tests.conftest import user_client
from tests.labeling.conftest import ModelServer

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/v1/labeling-projects/"
N = 12


@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    return x, y, LogisticRegression(max_iter=2000).fit(x, y)


@pytest.fixture(scope="module")
def model_server(digits, tmp_path_factory) -> Iterator[ModelServer]:
    path = tmp_path_factory.mktemp("digits") / "model.joblib"
    joblib.dump(digits[2], path)
    srv = ModelServer(path, "digits")
    yield srv
    srv.stop()


def png(pixels: np.ndarray) -> bytes:
    """An 8×8 digit (values 0..16) as a grayscale PNG (0..255)."""
    out = io.BytesIO()
    Image.fromarray((pixels.reshape(8, 8) * 255 / 16).round().astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def served(project, url: str | None, name: str = "digits") -> InferenceService:
    svc = InferenceService.objects.create(project=project, name=name)
    revision = Revision.objects.create(service=svc, number=3, config={"model_name": "digits"})
    if url:
        Replica.objects.create(revision=revision, index=0, upstream=url, status=Replica.Status.READY)
    svc.current_revision = revision
    svc.save(update_fields=["current_revision"])
    return svc


@pytest.fixture
def portal(ls, live_server, settings):
    settings.LABELING_PORTAL_URL = live_server.url
    return live_server


@pytest.fixture
def labeling(world, portal, digits):
    x = digits[0]
    files = {f"img/{i:02d}.png": png(x[i]) for i in range(N)}
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice, name="digits"), files)
    return services.create_labeling_project(
        world.project_a, world.alice, name=f"digits-{os.getpid()}-{version.pk}", dataset_version=version,
        kind="image_classification", labels=[str(d) for d in range(10)],
    )  # fmt: skip


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_attaching_a_served_model_yields_a_stored_prediction_for_every_task(world, labeling, model_server, digits):
    svc = served(world.project_a, model_server.url)
    client = user_client(world.bob)  # an editor
    response = client.post(f"{URL}{labeling.pk}/ml-backend/", {"service": svc.pk}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["model_version"] == "digits@r3"
    row = MLBackend.objects.get(labeling_project=labeling)
    assert identify_hasher(row.password_hash)  # only a password hash is kept
    with server.connect() as ls_client:
        backends = ls_client.request("GET", "/api/ml/", params={"project": labeling.ls_project_id})
    assert [(b["id"], b["auth_method"], b["state"]) for b in backends] == [(row.ls_ml_backend_id, "BASIC_AUTH", "CO")]
    assert backends[0]["url"] == f"{labeling_url(labeling)}"

    response = client.post(f"{URL}{labeling.pk}/preannotate/", format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"predictions": N}

    expected = digits[2].predict(digits[0][:N])
    with server.connect() as ls_client:
        tasks = list(ls_client.list_tasks(labeling.ls_project_id))
        predictions = {
            p["task"]: p for t in tasks for p in ls_client.request("GET", "/api/predictions/", params={"task": t["id"]})
        }
    assert len(tasks) == N
    assert set(predictions) == {t["id"] for t in tasks}
    for task in tasks:
        stored = predictions[task["id"]]
        index = int(task["data"]["path"][4:6])
        assert stored["model_version"] == "digits@r3"
        assert 0 < stored["score"] <= 1
        assert stored["result"][0]["value"]["choices"] == [str(expected[index])]
        assert (stored["result"][0]["from_name"], stored["result"][0]["to_name"]) == ("label", "image")

    ordered = client.get(f"{URL}{labeling.pk}/uncertain/").json()["results"]
    scores = [r["score"] for r in ordered]
    assert len(ordered) == N
    assert scores == sorted(scores)
    assert {r["task"] for r in ordered} == {t["id"] for t in tasks}


def labeling_url(labeling) -> str:
    from django.conf import settings

    return f"{settings.LABELING_PORTAL_URL}/labeling/ml/{labeling.pk}"


def test_label_studio_asks_predict_over_the_protocol(world, labeling, model_server, digits):
    svc = served(world.project_a, model_server.url)
    user_client(world.alice).post(f"{URL}{labeling.pk}/ml-backend/", {"service": svc.pk}, format="json")
    with server.connect() as ls_client:
        first = next(iter(ls_client.list_tasks(labeling.ls_project_id)))
        # The Data Manager's "retrieve predictions" action: Label Studio POSTs /predict to the portal.
        ls_client.request("POST", "/api/dm/actions", params={"id": "retrieve_tasks_predictions",
                          "project": labeling.ls_project_id}, json={"selectedItems": {"all": False,
                          "included": [first["id"]]}})  # fmt: skip
        stored = ls_client.request("GET", "/api/predictions/", params={"task": first["id"]})
    index = int(first["data"]["path"][4:6])
    assert [p["result"][0]["value"]["choices"] for p in stored] == [[str(digits[2].predict(digits[0][[index]])[0])]]
    assert stored[0]["model_version"] == "digits@r3"
    assert LabelingTask.objects.get(ls_task_id=first["id"]).score == pytest.approx(stored[0]["score"])


def test_the_protocol_refuses_wrong_basic_auth(world, labeling, model_server, client):
    svc = served(world.project_a, model_server.url)
    user_client(world.alice).post(f"{URL}{labeling.pk}/ml-backend/", {"service": svc.pk}, format="json")
    row = MLBackend.objects.get(labeling_project=labeling)
    base = f"/labeling/ml/{labeling.pk}"
    for auth in (None, basic(row.username, "wrong"), basic("someone", "x"), "Basic !!!", "Bearer abc"):
        headers = {"HTTP_AUTHORIZATION": auth} if auth else {}
        assert client.get(f"{base}/health", **headers).status_code == 401
        response = client.post(f"{base}/predict", {"tasks": []}, content_type="application/json", **headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Basic")
    assert client.get(f"/labeling/ml/{labeling.pk + 999}/health").status_code == 401


def test_another_tenants_service_cannot_be_attached(world, labeling, model_server):
    theirs = served(world.project_b, model_server.url, name="theirs")
    response = user_client(world.alice).post(f"{URL}{labeling.pk}/ml-backend/", {"service": theirs.pk}, format="json")
    assert response.status_code == 404
    assert not MLBackend.objects.exists()
    # and someone outside project A cannot reach its labeling project at all
    outsider = user_client(world.charlie)
    response = outsider.post(f"{URL}{labeling.pk}/ml-backend/", {"service": theirs.pk}, format="json")
    assert response.status_code == 404


def test_bad_input_is_400_and_a_viewer_cannot_attach(world, labeling):
    from apps.projects.models import Role

    client = user_client(world.alice)
    for body in ({}, {"service": "x"}, {"service": None}):
        response = client.post(f"{URL}{labeling.pk}/ml-backend/", body, format="json")
        assert response.status_code == 400
        assert "service" in response.json()
    response = client.post(f"{URL}{labeling.pk}/preannotate/", format="json")
    assert response.status_code == 400
    assert "service" in response.json()
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    svc = served(world.project_a, None)
    response = user_client(viewer).post(f"{URL}{labeling.pk}/ml-backend/", {"service": svc.pk}, format="json")
    assert response.status_code == 403
    assert user_client(viewer).get(f"{URL}{labeling.pk}/uncertain/").status_code == 200


def test_the_page_attaches_pre_annotates_and_lists_uncertain_first(world, labeling, model_server, client):
    svc = served(world.project_a, model_server.url)
    theirs = served(world.project_b, model_server.url, name="theirs")
    client.force_login(world.bob)
    base = f"/p/project-a/labeling/{labeling.pk}"
    page = client.get(f"{base}/").content.decode()
    assert "No inference service attached." in page
    assert f'<option value="{svc.pk}"' in page
    assert f'<option value="{theirs.pk}"' not in page
    response = client.post(f"{base}/ml-backend/", {"service": theirs.pk}, follow=True)
    assert "Choose an inference service of this project." in response.content.decode()
    assert not MLBackend.objects.exists()
    client.post(f"{base}/ml-backend/", {"service": svc.pk})
    assert MLBackend.objects.get(labeling_project=labeling).service == svc
    response = client.post(f"{base}/preannotate/", follow=True)
    page = response.content.decode()
    assert f"{N} predictions imported into Label Studio." in page
    assert "Uncertain first" in page
    lowest = LabelingTask.objects.filter(labeling_project=labeling).order_by("score").first()
    assert page.index(str(lowest)) < page.index("</tbody>", page.index("Uncertain first"))
    viewer = factories.UserFactory(username="vera")
    from apps.projects.models import Role

    factories.add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert "Attach as auto-labeler" not in client.get(f"{base}/").content.decode()
    assert client.post(f"{base}/preannotate/").status_code in (403, 404)
