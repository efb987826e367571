"""The serving router end to end: real model-server processes behind /serving/<project>/<service>/ of the real
ASGI application (uvicorn on loopback): predictions, balancing, canary weights, shadow copies, pass-through of
the model server's errors, a replica killed mid-traffic, and the counts in stats and /metrics."""

from __future__ import annotations

import re
import time
from collections import Counter

import httpx
import pytest
from django.test import override_settings

from apps.serving import stats
from apps.serving.models import InferenceService, Replica
from apps.serving.router.asgi import invalidate
from tests.factories import make_token
from tests.serving import replicas as replica_fixtures
from tests.serving.replicas import IRIS_CLASSES, add_revision, infer_body, make_service, start_all

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Session fixtures: the model-server processes (started once for every router test module).
iris_path = replica_fixtures.iris_path
replicas = replica_fixtures.replicas

INFER = "/serving/project-a/iris/v2/models/iris/infer"


@pytest.fixture
def alice_client(world, live_asgi):
    with httpx.Client(
        base_url=live_asgi.url, headers={"Authorization": f"Bearer {make_token(world.alice)}"}, timeout=30
    ) as client:
        yield client


SCRAPE_TOKEN = "scrape-" + "s" * 40


def scrape(client: httpx.Client) -> str:
    """/metrics as Prometheus reads it, with the scrape token (portal/metrics.py)."""
    with override_settings(PORTAL_METRICS_TOKEN=SCRAPE_TOKEN):
        response = client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert response.status_code == 200, response.text
    return response.text


def serve(service: InferenceService, current, *, canary=None, canary_percent=0, shadow=None, shadow_percent=0):
    service.current_revision, service.canary_revision, service.canary_percent = current, canary, canary_percent
    service.shadow_revision, service.shadow_percent = shadow, shadow_percent
    service.save()
    invalidate()


def revisions_answering(client: httpx.Client, count: int) -> Counter[str]:
    seen: Counter[str] = Counter()
    for _ in range(count):
        response = client.post(INFER, json=infer_body())
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["data"] == IRIS_CLASSES
        seen[response.headers["x-portal-revision"]] += 1
    return seen


def wait_until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_it_answers_inference_and_metadata_from_a_ready_replica(world, alice_client, replicas):
    service = make_service(world.project_a)
    serve(service, add_revision(service, 1, replicas[0]))

    response = alice_client.post(INFER, json=infer_body())

    assert response.status_code == 200
    assert response.json()["model_name"] == "iris"
    assert response.json()["outputs"][0]["data"] == IRIS_CLASSES
    assert response.headers["x-portal-revision"] == "1"
    metadata = alice_client.get("/serving/project-a/iris/v2/models/iris").json()
    assert metadata["inputs"][0]["shape"] == [-1, 4]
    assert alice_client.get("/serving/project-a/iris/v2/health/ready").json() == {"ready": True}


def test_the_service_url_describes_the_revisions_taking_traffic(world, alice_client, replicas):
    service = make_service(world.project_a)
    r1, r2 = add_revision(service, 1, replicas[0], replicas[1]), add_revision(service, 2, replicas[2])
    r3 = add_revision(service, 3)
    serve(service, r1, canary=r2, canary_percent=20, shadow=r3, shadow_percent=5)

    info = alice_client.get("/serving/project-a/iris/").json()

    assert info["status"] == "ready"
    assert info["url"] == "/serving/project-a/iris/"
    assert info["revisions"] == [
        {"number": 1, "role": "current", "traffic_percent": 80, "ready_replicas": 2},
        {"number": 2, "role": "canary", "traffic_percent": 20, "ready_replicas": 1},
        {"number": 3, "role": "shadow", "traffic_percent": 5, "ready_replicas": 0},
    ]
    assert alice_client.post("/serving/project-a/iris/").status_code == 405
    assert alice_client.get("/serving/project-a/iris/elsewhere").status_code == 404


def test_it_balances_across_the_ready_replicas(world, alice_client, replicas):
    service = make_service(world.project_a)
    serve(service, add_revision(service, 1, replicas[0], replicas[1]))
    before = [replicas[0].answered(), replicas[1].answered()]

    assert revisions_answering(alice_client, 100) == {"1": 100}

    served = [replicas[0].answered() - before[0], replicas[1].answered() - before[1]]
    assert sum(served) == 100
    assert min(served) >= 30, served


@pytest.mark.parametrize(("percent", "low", "high"), [(0, 0, 0), (50, 170, 230), (100, 400, 400)])
def test_canary_takes_its_share_of_requests(world, alice_client, replicas, percent, low, high):
    service = make_service(world.project_a)
    r1, r2 = add_revision(service, 1, replicas[0]), add_revision(service, 2, replicas[1])
    serve(service, r1, canary=r2, canary_percent=percent)

    seen = revisions_answering(alice_client, 400)

    assert low <= seen["2"] <= high, seen
    assert seen["1"] + seen["2"] == 400


def test_moving_the_canary_weight_moves_traffic_without_a_restart(world, alice_client, replicas):
    service = make_service(world.project_a)
    r1, r2 = add_revision(service, 1, replicas[0]), add_revision(service, 2, replicas[1])
    shares = []
    for percent in (0, 50, 100):
        serve(service, r1, canary=r2, canary_percent=percent)
        shares.append(revisions_answering(alice_client, 200)["2"] / 200)
    assert shares[0] == 0
    assert 0.4 <= shares[1] <= 0.6
    assert shares[2] == 1


@pytest.mark.parametrize(("percent", "copies"), [(100, 100), (50, 50)])
def test_the_shadow_gets_copies_and_never_answers(world, alice_client, replicas, percent, copies):
    service = make_service(world.project_a)
    r1, r3 = add_revision(service, 1, replicas[0]), add_revision(service, 3, replicas[2])
    serve(service, r1, shadow=r3, shadow_percent=percent)
    shadow_before = replicas[2].answered()

    assert revisions_answering(alice_client, 100) == {"1": 100}

    wait_until(lambda: replicas[2].answered() - shadow_before >= copies)
    time.sleep(0.3)
    assert replicas[2].answered() - shadow_before == copies
    stats_text = scrape(alice_client)
    shadowed = metric(stats_text, "portal_serving_requests_total", service="iris", revision="3", kind="shadow")
    assert shadowed >= copies


def test_model_server_errors_come_through_and_the_service_keeps_serving(world, alice_client, replicas):
    service = make_service(world.project_a)
    serve(service, add_revision(service, 1, replicas[0]))

    bad = alice_client.post(INFER, json=infer_body([[5.1, 3.5, 1.4]]))
    assert bad.status_code == 400
    assert bad.json() == {"error": "input 'input-0': 3 features per row, the model takes 4"}
    assert bad.headers["x-portal-revision"] == "1"
    not_json = alice_client.post(INFER, content=b"{not json", headers={"content-type": "application/json"})
    assert not_json.status_code == 400
    assert "error" in not_json.json()
    unknown = alice_client.post("/serving/project-a/iris/v2/models/nope/infer", json=infer_body())
    assert unknown.status_code == 404
    assert "unknown model 'nope'" in unknown.json()["error"]

    assert revisions_answering(alice_client, 5) == {"1": 5}


def test_a_killed_replica_is_skipped_and_its_requests_retried_elsewhere(world, alice_client, iris_path):
    servers = start_all(iris_path, 2)
    try:
        service = make_service(world.project_a)
        serve(service, add_revision(service, 1, *servers))
        assert revisions_answering(alice_client, 20) == {"1": 20}
        assert min(servers[0].answered(), servers[1].answered()) >= 5  # both in use (none avoided as refusing)
        text = scrape(alice_client)
        retries_before = metric(text, "portal_serving_retries_total", service="iris", revision="1")

        servers[0].kill()
        survivor_before = servers[1].answered()
        assert revisions_answering(alice_client, 100) == {"1": 100}

        assert servers[1].answered() - survivor_before == 100
        text = scrape(alice_client)
        assert metric(text, "portal_serving_retries_total", service="iris", revision="1") > retries_before
    finally:
        for server in servers:
            server.stop()


def test_no_ready_replica_is_a_503_with_the_reason(world, alice_client, replicas):
    service = make_service(world.project_a)
    revision = add_revision(service, 1, replicas[0])
    Replica.objects.filter(revision=revision).update(status=Replica.Status.STARTING)
    service.status, service.reason = InferenceService.Status.DEPLOYING, "replica 0 is loading the model"
    serve(service, revision)

    response = alice_client.post(INFER, json=infer_body())

    assert response.status_code == 503
    assert "deploying" in response.json()["error"]
    assert "replica 0 is loading the model" in response.json()["error"]


def test_counts_reach_series_and_metrics(world, alice_client, replicas):
    service = make_service(world.project_a)
    revision = add_revision(service, 1, replicas[0])
    serve(service, revision)
    labels = {"project": "project-a", "service": "iris", "revision": "1", "kind": "live"}
    before = scrape(alice_client)

    revisions_answering(alice_client, 30)
    for _ in range(5):
        assert alice_client.post(INFER, json=infer_body([[1.0]])).status_code == 400

    after = scrape(alice_client)
    for outcome, count in (("ok", 30), ("client_error", 5)):
        delta = metric(after, "portal_serving_requests_total", outcome=outcome, **labels) - metric(
            before, "portal_serving_requests_total", outcome=outcome, **labels
        )
        assert delta == count
    assert re.search(r'portal_serving_request_duration_seconds_bucket\{[^}]*revision="1"[^}]*\} \d', after)
    stats.flush_now()
    points = stats.series(service, minutes=5)[1]
    assert sum(points["requests"]) == 35
    assert sum(points["client_errors"]) == 5
    assert sum(points["errors"]) == 0
    assert len(points["t"]) == 5
    assert any(p is not None and p > 0 for p in points["p50_ms"])


def test_a_body_over_the_limit_is_refused_before_it_reaches_a_replica(world, replicas, live_asgi, settings):
    settings.PORTAL_SERVING_ROUTER_MAX_BODY_MB = 1  # read when the server's router state is made (first request)
    service = make_service(world.project_a, auth="public")
    serve(service, add_revision(service, 1, replicas[0]))
    before = replicas[0].answered()

    response = httpx.post(live_asgi.url + INFER, content=b"x" * (2 << 20), timeout=30)

    assert response.status_code == 413
    assert replicas[0].answered() == before


def test_the_path_goes_up_as_the_client_encoded_it(world, alice_client, replicas):
    service = make_service(world.project_a)
    serve(service, add_revision(service, 1, replicas[0]))

    spaced = alice_client.get("/serving/project-a/iris/v2/models/ir%20is")
    smuggled = alice_client.get("/serving/project-a/iris/v2/models/x%0D%0AHost:%20evil/ready?a=1")

    assert spaced.status_code == 404
    assert "unknown model 'ir is'" in spaced.json()["error"]
    assert smuggled.status_code == 404
    assert "unknown model 'x\\r\\nHost: evil'" in smuggled.json()["error"]
