"""A cross-tenant probe beyond the REST API (tests/projects/test_access_matrix.py walks that): the run-log
websocket, the MLflow API, the notebook proxy (HTTP and websockets) and the serving router and pages answer another
project's objects exactly as they answer objects that do not exist.

alice owns project A; charlie owns project B; alice is no member of B. Her credentials here are the widest she
has: her session (the browser's websocket, pages, the notebook proxy) and a personal token not limited to a
project (MLflow, the serving router). The owner-only rules inside one project are tested with the proxy
(tests/notebooks/test_proxy.py) and the router (tests/serving/test_router_auth.py).
"""

from __future__ import annotations

import json

import httpx
import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from apps.jobs.consumers import CLOSE_NOT_FOUND
from tests.access import make_run
from tests.factories import make_token, model_version, tracking_run
from tests.notebooks.factories import notebook
from tests.serving.replicas import infer_body, make_service

MISSING = 987654321


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def log_socket_close_code(live, user, run_id: int) -> int | None:
    """Open ws/runs/<run_id>/logs/ as `user`; the close code the server sends, or None when it serves the log (a
    socket it keeps open sends the run's status first; a refused one is closed before any message, however slowly
    a busy server gets there)."""
    headers = {"Origin": live.url, "Cookie": session_cookie(user)}
    with connect(f"{live.ws_url}/ws/runs/{run_id}/logs/", additional_headers=headers, open_timeout=30) as ws:
        try:
            first = json.loads(ws.recv(timeout=30))
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
        assert first["type"] in ("lines", "status"), first
        return None


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_log_socket_of_another_projects_run_closes_as_not_found(live_asgi, world):
    theirs = make_run(world.project_b, world.charlie)
    mine = make_run(world.project_a, world.alice)

    assert log_socket_close_code(live_asgi, world.alice, theirs.pk) == CLOSE_NOT_FOUND == 4404
    assert log_socket_close_code(live_asgi, world.alice, MISSING) == CLOSE_NOT_FOUND  # the same answer
    assert log_socket_close_code(live_asgi, world.bob, theirs.pk) == CLOSE_NOT_FOUND  # A's editor, too
    assert log_socket_close_code(live_asgi, world.alice, mine.pk) is None  # control: her own run's log stays open
    assert log_socket_close_code(live_asgi, world.charlie, theirs.pk) is None


# --- MLflow API ------------------------------------------------------------------------------------------------


def mlflow(client: Client, token: str, endpoint: str, body: dict | None = None, **params):
    headers = {"authorization": f"Bearer {token}"}
    if body is None:
        return client.get(f"/api/2.0/mlflow/{endpoint}", params, headers=headers)
    return client.post(f"/api/2.0/mlflow/{endpoint}", json.dumps(body), "application/json", headers=headers)


def assert_does_not_exist(response) -> None:
    assert response.status_code == 404, response.content
    assert response.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST", response.content


@pytest.fixture
def theirs(world) -> dict:
    """Project B's experiment, run and model version, made by its owner."""
    version = model_version(world.project_b, world.charlie, model_name="secret-model")
    run = tracking_run(world.project_b, world.charlie, name="secret-run")
    return {"experiment_id": str(run.experiment_id), "run_id": run.run_uuid, "model": version.registered_model.name}


def test_a_personal_token_cannot_reach_another_projects_tracking_objects(world, theirs):
    token, client = make_token(world.alice), Client()
    experiment_id, run_id = theirs["experiment_id"], theirs["run_id"]

    probes = {
        "experiments/get": mlflow(client, token, "experiments/get", experiment_id=experiment_id),
        "experiments/update": mlflow(
            client, token, "experiments/update", {"experiment_id": experiment_id, "new_name": "taken"}
        ),
        "runs/create": mlflow(client, token, "runs/create", {"experiment_id": experiment_id}),
        "runs/get": mlflow(client, token, "runs/get", run_id=run_id),
        "runs/log-metric": mlflow(
            client, token, "runs/log-metric", {"run_id": run_id, "key": "m", "value": 1, "timestamp": 1}
        ),
        "runs/set-tag": mlflow(client, token, "runs/set-tag", {"run_id": run_id, "key": "k", "value": "v"}),
        "runs/delete": mlflow(client, token, "runs/delete", {"run_id": run_id}),
        "metrics/get-history": mlflow(client, token, "metrics/get-history", run_id=run_id, metric_key="m"),
        "artifacts/list": mlflow(client, token, "artifacts/list", run_id=run_id),
    }
    for endpoint, response in probes.items():
        assert response.status_code == 404, (endpoint, response.content)
        assert_does_not_exist(response)
    # Ids that never existed get the very same answer: the probe learns nothing.
    assert_does_not_exist(mlflow(client, token, "experiments/get", experiment_id=str(MISSING)))
    assert_does_not_exist(mlflow(client, token, "runs/get", run_id="0" * 32))


def test_searching_with_another_projects_ids_finds_nothing(world, theirs):
    token, client = make_token(world.alice), Client()

    found = mlflow(client, token, "runs/search", {"experiment_ids": [theirs["experiment_id"]]})

    assert found.status_code in (200, 404), found.content
    if found.status_code == 200:
        assert found.json().get("runs", []) == []
    else:
        assert_does_not_exist(found)


def test_another_projects_run_is_unchanged_after_the_probe(world, theirs):
    from apps.models.models import Run

    token, client = make_token(world.alice), Client()
    mlflow(client, token, "runs/update", {"run_id": theirs["run_id"], "status": "KILLED"})
    mlflow(client, token, "runs/delete", {"run_id": theirs["run_id"]})

    run = Run.objects.get(run_uuid=theirs["run_id"])
    assert run.status != "KILLED"
    assert run.lifecycle_stage == "active"


# --- Notebook proxy --------------------------------------------------------------------------------------------


def ws_refusal(live, user, path: str) -> int | None:
    """The HTTP status that refuses `user`'s websocket handshake at `path` (None: it was accepted)."""
    headers = {"Origin": live.url, "Cookie": session_cookie(user)}
    try:
        connect(f"{live.ws_url}{path}", additional_headers=headers, open_timeout=10).close()
    except InvalidStatus as refused:
        return refused.response.status_code
    return None


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_another_projects_notebook_is_not_found_over_http_and_websockets(live_asgi, world):
    theirs = notebook(world.project_b, world.charlie)
    headers = {"Origin": live_asgi.url, "Cookie": session_cookie(world.alice)}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=30) as alice:
        for path in ["lab", "api/contents", "api/kernels", "files/secret.csv"]:
            assert alice.get(f"/notebook/{theirs.pk}/{path}").status_code == 404, path
            assert alice.get(f"/notebook/{MISSING}/{path}").status_code == 404, path  # the same answer
        assert alice.post(f"/notebook/{theirs.pk}/api/kernels", json={}).status_code == 404
        assert alice.get(f"/p/{world.project_b.slug}/notebooks/{theirs.pk}/").status_code == 404

    kernel_socket = f"/notebook/{theirs.pk}/api/kernels/x/channels"
    assert ws_refusal(live_asgi, world.alice, kernel_socket) == 404
    assert ws_refusal(live_asgi, world.alice, f"/notebook/{MISSING}/api/kernels/x/channels") == 404
    assert ws_refusal(live_asgi, world.alice, f"/notebook/{theirs.pk}/terminals/websocket/1") == 404


# --- Serving router and pages ----------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_another_projects_service_is_not_found_through_the_router(live_asgi, world):
    make_service(world.project_b, "iris")
    token = make_token(world.alice)

    def infer(project: str, service: str) -> httpx.Response:
        url = f"{live_asgi.url}/serving/{project}/{service}/v2/models/{service}/infer"
        return httpx.post(url, json=infer_body(), headers={"Authorization": f"Bearer {token}"}, timeout=30)

    for response in (infer(world.project_b.slug, "iris"), infer(world.project_b.slug, "missing"), infer("nope", "x")):
        assert response.status_code == 404, response.text
    assert infer(world.project_b.slug, "iris").json() == infer(world.project_b.slug, "missing").json()
    metadata = httpx.get(
        f"{live_asgi.url}/serving/{world.project_b.slug}/iris/v2/models/iris",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert metadata.status_code == 404


def test_another_projects_service_pages_and_actions_are_not_found(world):
    from apps.serving.models import InferenceService

    service = make_service(world.project_b, "iris")
    client = Client()
    client.force_login(world.alice)
    base = f"/p/{world.project_b.slug}/services"

    for path in [f"{base}/", f"{base}/{service.pk}/", f"{base}/{service.pk}/status/", f"{base}/{service.pk}/edit/"]:
        assert client.get(path).status_code == 404, path
    for action in ["stop", "scale", "rotate-key", "delete"]:
        assert client.post(f"{base}/{service.pk}/{action}/", {"replicas": 3}).status_code == 404, action
    service.refresh_from_db()
    assert service.status == InferenceService.Status.READY
    assert service.key_digest == ""
    assert InferenceService.objects.filter(pk=service.pk).exists()
