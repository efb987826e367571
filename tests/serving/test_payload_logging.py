"""Payload logging through the real router (uvicorn on loopback, a real model-server replica): the sampled share,
the request id handed back, the size cap, the rows kept per revision, secrets never stored; then ground truth by
request id and the live accuracy it gives (API and the service page), bad input and another tenant."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from apps.serving import payloads
from apps.serving.models import PayloadLog
from apps.serving.router.asgi import invalidate
from tests.conftest import user_client
from tests.factories import make_token
from tests.serving.replicas import IRIS_CLASSES, ModelServer, add_revision, infer_body, make_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

INFER = "/serving/project-a/iris/v2/models/iris/infer"
SECRET = "sekrit-" + "z" * 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.serving.replicas import iris_model

    replica = ModelServer(iris_model(tmp_path_factory.mktemp("iris"))).start()
    yield replica
    replica.stop()


@pytest.fixture
def token(world):
    return make_token(world.alice)


@pytest.fixture
def client(live_asgi, token):
    with httpx.Client(base_url=live_asgi.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
        yield c


def served(world, server, **settings):
    service = make_service(world.project_a)
    for key, value in settings.items():
        setattr(service, key, value)
    service.current_revision = add_revision(service, 1, server)
    service.save()
    invalidate()
    payloads.flush()  # nothing left over from an earlier test
    PayloadLog.objects.all().delete()
    return service


def test_it_logs_the_configured_share_and_hands_back_the_request_id(world, server, client):
    service = served(world, server, payload_log_percent=25)

    answers = [client.post(INFER, json=infer_body()) for _ in range(40)]
    stored = payloads.flush()

    assert all(a.status_code == 200 for a in answers)
    ids = [a.headers["x-portal-request-id"] for a in answers if "x-portal-request-id" in a.headers]
    assert len(ids) == 10 == stored
    logs = {log.request_id: log for log in PayloadLog.objects.filter(service=service)}
    assert set(logs) == set(ids)
    log = logs[ids[0]]
    assert log.revision.number == 1
    assert log.status == 200
    assert log.path == "/v2/models/iris/infer"
    assert payloads.predictions(log) == IRIS_CLASSES
    assert '"shape":[3,4]' in log.request
    assert client.get("/serving/project-a/iris/v2/health/ready").headers.get("x-portal-request-id") is None


def test_logging_off_logs_nothing(world, server, client):
    served(world, server)

    answer = client.post(INFER, json=infer_body())

    assert "x-portal-request-id" not in answer.headers
    assert payloads.flush() == 0


def test_bodies_over_the_cap_keep_only_their_size(world, server, client):
    served(world, server, payload_log_percent=100, payload_log_max_kb=1)
    rows = [[5.1, 3.5, 1.4, 0.2]] * 100

    big = client.post(INFER, json=infer_body(rows))
    small = client.post(INFER, json=infer_body())
    payloads.flush()

    big_log = PayloadLog.objects.get(request_id=big.headers["x-portal-request-id"])
    assert big_log.request == ""
    assert big_log.request_bytes == len(big.request.content) > 1024
    assert payloads.predictions(big_log) == [0] * 100  # the answer is under 1 KiB: kept
    small_log = PayloadLog.objects.get(request_id=small.headers["x-portal-request-id"])
    assert small_log.request
    assert small_log.request_bytes == len(small.request.content)


def test_each_revision_keeps_its_newest_rows(world, server, client):
    served(world, server, payload_log_percent=100, payload_log_keep=5)

    ids = [client.post(INFER, json=infer_body()).headers["x-portal-request-id"] for _ in range(8)]
    payloads.flush()

    assert set(PayloadLog.objects.values_list("request_id", flat=True)) == set(ids[-5:])


def test_credentials_and_secret_looking_values_are_never_stored(world, server, client, token):
    served(world, server, payload_log_percent=100)
    body = infer_body() | {"parameters": {"api_key": SECRET, "nested": {"password": SECRET}, "note": "kept"}}

    answer = client.post(INFER, json=body, headers={"X-Api-Token": SECRET, "X-Trace": "t-1", "Cookie": f"s={SECRET}"})
    payloads.flush()

    assert answer.status_code == 200, answer.text
    log = PayloadLog.objects.get(request_id=answer.headers["x-portal-request-id"])
    stored = f"{log.headers} {log.request} {log.response}"
    assert SECRET not in stored
    assert token not in stored
    assert "authorization" not in log.headers
    assert "cookie" not in log.headers
    assert log.headers["x-api-token"] == payloads.REDACTED
    assert log.headers["x-trace"] == "t-1"
    assert '"note":"kept"' in log.request
    assert '"api_key":"[redacted]"' in log.request


def test_ground_truth_by_request_id_gives_live_accuracy(world, server, client):
    service = served(world, server, payload_log_percent=100)
    one_row = client.post(INFER, json=infer_body([[5.1, 3.5, 1.4, 0.2]])).headers["x-portal-request-id"]
    three_rows = client.post(INFER, json=infer_body()).headers["x-portal-request-id"]
    payloads.flush()
    api = user_client(world.bob)
    url = f"/api/v1/services/{service.pk}/ground-truth/"

    labels = [
        {"request_id": one_row, "label": 0},  # right
        {"request_id": three_rows, "label": [0, 2, 2]},  # predicted [0, 2, 1]: two of three right
        {"request_id": "0" * 32, "label": 1},
    ]
    response = api.post(url, {"labels": labels}, format="json")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "updated": 2, "unknown": ["0" * 32], "labelled": 4, "correct": 3, "accuracy": 0.75,
    }  # fmt: skip
    logged = api.get(f"/api/v1/services/{service.pk}/payloads/").json()
    assert {row["request_id"]: row["label"] for row in logged["results"]} == {one_row: 0, three_rows: [0, 2, 2]}
    browser = Client()
    browser.force_login(world.alice)
    page = browser.get(reverse("serving:service-detail", kwargs={"project": "project-a", "pk": service.pk}))
    assert "Live accuracy: 0.750 (3 of 4 labelled predictions right)." in page.content.decode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"labels": []}, "This list may not be empty."),
        ({"labels": [{"request_id": "x"}]}, "Item 0: an object with exactly request_id (a string) and label."),
        ({"labels": [{"request_id": "x", "label": None}]}, "Item 0: the label is missing."),
        ({}, "This field is required."),
    ],
)
def test_bad_ground_truth_is_a_400_naming_the_field(world, body, message):
    service = make_service(world.project_a)

    response = user_client(world.bob).post(f"/api/v1/services/{service.pk}/ground-truth/", body, format="json")

    assert response.status_code == 400
    assert message in response.json()["labels"]


def test_another_tenant_cannot_label_or_read_the_logs(world):
    service = make_service(world.project_a)
    charlie = user_client(world.charlie)

    labels = {"labels": [{"request_id": "x", "label": 1}]}
    assert charlie.post(f"/api/v1/services/{service.pk}/ground-truth/", labels, format="json").status_code == 404
    assert charlie.get(f"/api/v1/services/{service.pk}/payloads/").status_code == 404
