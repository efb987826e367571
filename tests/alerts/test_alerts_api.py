"""/api/v1/alert-channels/, alert-rules/, alert-events/, alert-deliveries/: writes through the services, field
errors as 400, write-only webhook URLs and secrets, the test button, other tenants' rows 404."""

from __future__ import annotations

import pytest

from apps.alerts import engine
from apps.alerts.kinds import Finding
from apps.alerts.models import AlertRule, Channel, Delivery
from apps.outbox.models import PendingTask
from apps.projects.models import Role
from tests.alerts.factories import channel as make_channel
from tests.alerts.factories import rule as make_rule
from tests.conftest import user_client
from tests.factories import UserFactory, add_member

pytestmark = pytest.mark.django_db


def test_it_creates_a_dingtalk_channel_without_ever_returning_its_url_or_secret(world):
    api = user_client(world.alice)
    body = {"project": "project-a", "name": "ops-robot", "kind": "dingtalk",
            "url": "https://oapi.dingtalk.com/robot/send?access_token=t0k", "secret": "SECabc"}  # fmt: skip
    response = api.post("/api/v1/alert-channels/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert "url" not in data
    assert "secret" not in data
    assert data["has_url"]
    assert data["has_secret"]
    channel = Channel.objects.get(pk=data["id"])
    assert channel.url.endswith("access_token=t0k")
    assert channel.secret == "SECabc"
    listed = api.get("/api/v1/alert-channels/?project=project-a").json()["results"][0]
    assert "t0k" not in str(listed)
    assert "SECabc" not in str(listed)
    # changing the name keeps the stored URL and secret
    assert api.patch(f"/api/v1/alert-channels/{channel.pk}/", {"name": "robot"}, format="json").status_code == 200
    channel.refresh_from_db()
    assert channel.name == "robot"
    assert channel.secret == "SECabc"
    assert channel.url.endswith("t0k")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"kind": "slack"}, "url", "needs its URL"),
        ({"kind": "slack", "url": "ftp://x/y"}, "url", "http"),
        ({"kind": "pager"}, "kind", "Choose one of"),
        ({"kind": "email", "recipients": "ops@example.com, nope"}, "recipients", "nope"),
        ({"kind": "inapp", "recipients": "charlie"}, "recipients", "charlie"),
        ({"kind": "wecom", "url": "https://x/y", "secret": "s"}, "secret", "signed"),
        ({"kind": "inapp", "name": "Bad Name"}, "name", "lowercase"),
    ],
)
def test_bad_channels_are_400_with_field_messages(world, body, field, words):
    response = user_client(world.alice).post(
        "/api/v1/alert-channels/", {"project": "project-a", "name": "c", **body}, format="json"
    )
    assert response.status_code == 400
    assert words in str(response.json()[field])
    assert not Channel.objects.exists()


def test_it_creates_a_rule_and_lists_the_kinds(world):
    api = user_client(world.bob)
    channel = make_channel(world.project_a, world.alice)
    body = {"project": "project-a", "name": "slow-iris", "kind": "service_latency",
            "params": {"threshold": "250", "minutes": 5}, "channels": [channel.pk]}  # fmt: skip
    response = api.post("/api/v1/alert-rules/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["params"] == {"threshold": 250.0, "minutes": 5, "min_requests": 10}
    assert data["channels"] == [channel.pk]
    assert data["firing"] == 0
    kinds = {k["name"]: k for k in api.get("/api/v1/alert-rules/kinds/").json()}
    assert {"run_failed", "run_succeeded", "run_duration", "service_error_rate", "service_latency", "quota_usage",
            "notebook_culled"} <= set(kinds)  # fmt: skip
    assert kinds["service_error_rate"]["trigger"] == "threshold"
    assert kinds["run_failed"]["trigger"] == "event"


@pytest.mark.parametrize(
    ("kind", "params", "field", "words"),
    [
        ("service_error_rate", {"threshold": 150}, "params.threshold", "at most 100"),
        ("service_error_rate", {"threshold": "lots"}, "params.threshold", "number"),
        ("service_error_rate", {}, "params.threshold", "required"),
        ("run_duration", {"minutes": 0}, "params.minutes", "at least 1"),
        ("run_failed", {"pipeline": "nope"}, "params.pipeline", "No pipeline"),
        ("service_latency", {"threshold": 9, "service": "ghost"}, "params.service", "No service"),
        ("run_failed", {"colour": "red"}, "params.colour", "Unknown parameter"),
        ("drift", {}, "kind", "Choose one of"),
    ],
)
def test_bad_rules_are_400_with_field_messages(world, kind, params, field, words):
    channel = make_channel(world.project_a, world.alice)
    body = {"project": "project-a", "name": "r", "kind": kind, "params": params, "channels": [channel.pk]}
    response = user_client(world.alice).post("/api/v1/alert-rules/", body, format="json")
    assert response.status_code == 400
    assert words in str(response.json()[field])
    assert not AlertRule.objects.exists()


def test_a_rule_cannot_send_to_another_projects_channel(world):
    foreign = make_channel(world.project_b, world.charlie)
    body = {"project": "project-a", "name": "r", "kind": "run_failed", "channels": [foreign.pk]}
    response = user_client(world.alice).post("/api/v1/alert-rules/", body, format="json")
    assert response.status_code == 400
    assert "channels" in response.json()


def test_changing_a_rule_closes_what_it_had_firing_quietly(world):
    rule = make_rule(world.project_a, world.alice, "quota_usage", {"threshold": 90})
    event = engine.fire(rule, Finding("quota:cpu", "quota of CPU cores", "95 %"))
    response = user_client(world.alice).patch(
        f"/api/v1/alert-rules/{rule.pk}/", {"params": {"threshold": 80}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["params"] == {"threshold": 80.0}
    event.refresh_from_db()
    assert event.status == "resolved"
    assert not Delivery.objects.filter(event=event, kind="resolved").exists()


def test_the_test_button_queues_a_delivery(world):
    channel = make_channel(world.project_a, world.alice)
    response = user_client(world.bob).post(f"/api/v1/alert-channels/{channel.pk}/test/")
    assert response.status_code == 202
    delivery = Delivery.objects.get(pk=response.json()["id"])
    assert (delivery.kind, delivery.status, delivery.channel) == ("test", "pending", channel)
    assert PendingTask.objects.filter(name="apps.alerts.tasks.deliver", args=[delivery.pk]).exists()


def test_a_viewer_sees_but_cannot_write_or_test(world):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    channel = make_channel(world.project_a, world.alice)
    api = user_client(viewer)
    assert api.get(f"/api/v1/alert-channels/{channel.pk}/").status_code == 200
    assert api.post(f"/api/v1/alert-channels/{channel.pk}/test/").status_code == 403
    body = {"project": "project-a", "name": "x", "kind": "inapp"}
    assert api.post("/api/v1/alert-channels/", body, format="json").status_code == 403


def test_other_tenants_rows_are_404(world):
    rule = make_rule(world.project_a, world.alice, "run_failed")
    channel = rule.channels.get()
    event = engine.fire(rule, Finding("k", "s", "m"))
    delivery = Delivery.objects.get(event=event)
    api = user_client(world.charlie)
    for url in (f"/api/v1/alert-rules/{rule.pk}/", f"/api/v1/alert-channels/{channel.pk}/",
                f"/api/v1/alert-events/{event.pk}/", f"/api/v1/alert-deliveries/{delivery.pk}/"):  # fmt: skip
        assert api.get(url).status_code == 404, url
    assert api.post(f"/api/v1/alert-channels/{channel.pk}/test/").status_code == 404
    assert api.delete(f"/api/v1/alert-rules/{rule.pk}/").status_code == 404
    assert api.get("/api/v1/alert-events/").json()["results"] == []


def test_history_lists_events_with_filters(world):
    rule = make_rule(world.project_a, world.alice, "run_failed", name="fails")
    first = engine.fire(rule, Finding("a", "pipeline a", "a failed"))
    engine.fire(rule, Finding("b", "pipeline b", "b failed"))
    engine.resolve(first, "a works again")
    api = user_client(world.bob)
    firing = api.get("/api/v1/alert-events/?status=firing").json()["results"]
    assert [e["subject"] for e in firing] == ["pipeline b"]
    resolved = api.get("/api/v1/alert-events/?status=resolved&rule=fails").json()["results"]
    assert resolved[0]["resolve_message"] == "a works again"
    assert resolved[0]["rule"] == "fails"
