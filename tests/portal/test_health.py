from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from portal import health

pytestmark = pytest.mark.smoke


def test_healthz_answers_without_touching_anything(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db(databases="__all__")
def test_readyz_checks_database_broker_and_channel_layer(client):
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "broker", "channel_layer", "sandbox"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["sandbox"]["mode"] == "auto"  # isolated or not, this host's local runtime says which


@pytest.fixture
def no_sandbox(monkeypatch):
    """A host without bubblewrap: what the agent's probe would find."""
    from apps.runtime.local import sandbox

    monkeypatch.setattr(sandbox, "support", lambda: sandbox.Support(False, "bwrap, pasta not found: install them"))


@pytest.mark.django_db(databases="__all__")
def test_readyz_says_local_workloads_are_not_isolated_and_stays_ready_in_mode_auto(client, no_sandbox):
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["checks"]["sandbox"]["ok"] is True
    assert body["sandbox"] == {
        "mode": "auto",
        "isolated": False,
        "detail": "no sandbox: bwrap, pasta not found: install them; local workloads of only one project are run on "
        "this host",
    }


@pytest.mark.django_db(databases="__all__")
def test_readyz_is_503_when_the_sandbox_is_required_and_missing(client, no_sandbox, settings):
    settings.PORTAL_LOCAL_SANDBOX = "required"
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["sandbox"]["ok"] is False
    assert "every local workload is refused" in body["checks"]["sandbox"]["error"]
    assert body["sandbox"]["isolated"] is False


@pytest.mark.django_db
def test_readyz_is_503_with_the_reason_when_a_dependency_is_down(client, monkeypatch):
    def broken() -> None:
        raise ConnectionRefusedError("broker unreachable")

    monkeypatch.setitem(health.CHECKS, "broker", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["broker"] == {
        "ok": False,
        "error": "ConnectionRefusedError: broker unreachable",
        "ms": body["checks"]["broker"]["ms"],
    }
    assert body["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_metrics_are_prometheus_text(client, settings):
    settings.PORTAL_METRICS_TOKEN = "t" * 32
    client.get("/healthz")
    response = client.get("/metrics", headers={"Authorization": "Bearer " + "t" * 32})
    assert response.status_code == 200
    text = response.content.decode()
    assert "# TYPE django_http_requests_total_by_method_total counter" in text
    assert 'django_http_requests_total_by_method_total{method="GET"}' in text


@pytest.mark.live
@pytest.mark.django_db(databases="__all__", transaction=True)
def test_readyz_stays_ready_request_after_request(live_asgi):
    """The channel layer's receive starts a poller that outlives the request: it must not be bound to that request's
    thread (it was, under uvicorn: every /readyz after the first in a process timed out on the channel layer)."""
    for _ in range(3):
        try:
            with urllib.request.urlopen(f"{live_asgi.url}/readyz", timeout=15) as response:
                status, body = response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            status, body = exc.code, json.loads(exc.read())
        assert status == 200, body["checks"]
