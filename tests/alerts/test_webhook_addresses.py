"""URLs users type (alert webhooks here; knowledge bases' LLM endpoints in tests/knowledge/test_knowledge_api.py)
never reach the portal's own machine or a private network unless the operator allows the network: a field error
when saved, a refused delivery when the name resolves there later, redirects never followed."""

from __future__ import annotations

import pytest

from apps.alerts import engine, senders
from apps.alerts.kinds import Finding
from apps.alerts.models import Channel, Delivery
from portal.lib.outbound import private_address
from tests.alerts.factories import channel as make_channel
from tests.alerts.factories import rule as make_rule
from tests.conftest import user_client


@pytest.fixture(autouse=True)
def refusing(settings) -> None:
    settings.OUTBOUND_ALLOWED_NETWORKS = []  # production's default (tests/conftest.py allows loopback)


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("http://127.0.0.1:8000/hook", "127.0.0.1"),
        ("http://10.1.2.3/hook", "10.1.2.3"),
        ("http://192.168.0.7/", "192.168.0.7"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://100.64.0.1/", "100.64.0.1"),
        ("http://[::1]:6379/", "::1"),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1"),
        ("http://[fd00::5]/", "fd00::5"),
        ("http://0.0.0.0/", "0.0.0.0"),
        ("http://localhost:5432/", "localhost"),
        ("https://8.8.8.8/hook", None),
        ("https://hooks.slack.com/services/T0/B0/x", None),  # a name is not looked up when a URL is saved
    ],
)
def test_addresses_written_as_numbers_are_judged_without_a_lookup(url, found):
    assert private_address(url, resolve=False) == found


def test_a_name_is_judged_by_every_address_it_resolves_to(settings):
    assert private_address("http://localhost:9/hook") in {"127.0.0.1", "::1"}
    assert private_address("http://no-such-host.invalid/hook") is None  # the request fails on its own
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    assert private_address("http://localhost:9/hook") is None


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:6379/", "http://[::1]/"])
def test_saving_a_private_address_is_a_field_error_and_saves_nothing(world, url):
    response = user_client(world.alice).post(
        "/api/v1/alert-channels/", {"project": "project-a", "name": "c", "kind": "webhook", "url": url}, format="json"
    )
    assert response.status_code == 400
    assert "OUTBOUND_ALLOWED_NETWORKS" in response.json()["url"][0]
    assert not Channel.objects.filter(name="c").exists()


@pytest.mark.django_db
def test_the_operator_may_allow_a_network(world, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["10.0.0.0/16"]
    api = user_client(world.alice)
    body = {"project": "project-a", "kind": "webhook"}
    inside = api.post("/api/v1/alert-channels/", {**body, "name": "c", "url": "http://10.0.3.8/hook"}, format="json")
    assert inside.status_code == 201, inside.json()
    outside = api.post("/api/v1/alert-channels/", {**body, "name": "d", "url": "http://10.1.0.8/hook"}, format="json")
    assert outside.status_code == 400
    assert "10.1.0.8" in outside.json()["url"][0]


def fire_one(world, channel):
    rule = make_rule(world.project_a, world.alice, "run_failed", channels=[channel], name="train-fails")
    event = engine.fire(rule, Finding("pipeline:train", "pipeline train", "Run train #3 failed", url="/p/a/runs/3/"))
    return Delivery.objects.get(event=event, channel=channel)


@pytest.mark.django_db
def test_a_name_that_resolves_to_this_machine_is_refused_when_sending(world, receiver, settings):
    port = receiver.url.rsplit(":", 1)[1]
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]  # saved while the operator allowed loopback
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"http://localhost:{port}/hook")
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "failed"
    delivery.refresh_from_db()
    assert delivery.error.startswith("Refused:")
    assert "OUTBOUND_ALLOWED_NETWORKS" in delivery.error
    assert receiver.requests == []


@pytest.mark.django_db
def test_a_redirect_is_an_answer_never_followed(world, receiver, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    receiver.status = 307
    receiver.location = f"{receiver.url}/elsewhere"
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"{receiver.url}/hook")
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "failed"
    delivery.refresh_from_db()
    assert delivery.error.startswith("HTTP 307")
    assert [r.path for r in receiver.requests] == ["/hook"]
