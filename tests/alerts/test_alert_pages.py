"""The alert pages: rules, channels (with the test button) and history; form errors as 400; other tenants 404."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.alerts import engine
from apps.alerts.kinds import Finding
from apps.alerts.models import AlertRule, Channel, Delivery
from tests.alerts.factories import channel as make_channel
from tests.alerts.factories import rule as make_rule

pytestmark = pytest.mark.django_db


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_rule_list_shows_rules_and_what_fires(world):
    rule = make_rule(world.project_a, world.alice, "run_failed", name="train-fails")
    engine.fire(rule, Finding("pipeline:train", "pipeline train", "failed"))
    page = client_of(world.bob).get("/p/project-a/alerts/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "train-fails" in text
    assert "Pipeline run failed" in text
    assert "1 firing" in text


def test_a_rule_is_created_from_the_form(world):
    channel = make_channel(world.project_a, world.alice, name="team")
    data = {"name": "errors", "kind": "service_error_rate", "threshold": "5", "minutes": "10", "min_requests": "",
            "channels": [channel.pk], "enabled": "on"}  # fmt: skip
    response = client_of(world.alice).post("/p/project-a/alerts/rules/new/", data)
    assert response.status_code == 302
    rule = AlertRule.objects.get(name="errors")
    assert rule.params == {"threshold": 5.0, "minutes": 10, "min_requests": 10}
    assert list(rule.channels.all()) == [channel]


def test_a_bad_rule_form_is_400_with_the_error_on_its_field(world):
    channel = make_channel(world.project_a, world.alice)
    data = {"name": "errors", "kind": "service_error_rate", "threshold": "250", "channels": [channel.pk]}
    response = client_of(world.alice).post("/p/project-a/alerts/rules/new/", data)
    assert response.status_code == 400
    assert "at most 100" in str(response.context["form"].errors["threshold"])
    assert not AlertRule.objects.exists()


def test_a_rule_is_edited_and_deleted(world):
    rule = make_rule(world.project_a, world.alice, "run_duration", {"minutes": 30}, name="slow")
    client = client_of(world.alice)
    page = client.get(f"/p/project-a/alerts/rules/{rule.pk}/")
    assert page.status_code == 200
    assert 'value="30"' in page.content.decode()
    data = {"name": "slow", "kind": "run_duration", "minutes": "45", "channels": [c.pk for c in rule.channels.all()]}
    assert client.post(f"/p/project-a/alerts/rules/{rule.pk}/", data).status_code == 302
    rule.refresh_from_db()
    assert rule.params == {"minutes": 45}
    assert not rule.enabled
    assert client.post(f"/p/project-a/alerts/rules/{rule.pk}/delete/").status_code == 302
    assert not AlertRule.objects.exists()


def test_a_webhook_channel_is_created_and_its_url_never_shown(world):
    data = {"name": "slack", "kind": "slack", "url": "https://hooks.slack.example/services/T/B/s3cr3t", "enabled": "on"}
    client = client_of(world.alice)
    assert client.post("/p/project-a/alerts/channels/new/", data).status_code == 302
    channel = Channel.objects.get(name="slack")
    assert channel.url.endswith("s3cr3t")
    for url in ("/p/project-a/alerts/channels/", f"/p/project-a/alerts/channels/{channel.pk}/"):
        assert "s3cr3t" not in client.get(url).content.decode()


def test_a_bad_channel_form_is_400_with_the_error_on_its_field(world):
    data = {"name": "mail", "kind": "email", "recipients": "not-an-address"}
    response = client_of(world.alice).post("/p/project-a/alerts/channels/new/", data)
    assert response.status_code == 400
    assert "Not an email address" in str(response.context["form"].errors["recipients"])


def test_the_test_button_queues_a_test_message(world):
    channel = make_channel(world.project_a, world.alice, name="team")
    response = client_of(world.bob).post(f"/p/project-a/alerts/channels/{channel.pk}/test/")
    assert response.status_code == 302
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.kind == "test"
    assert delivery.status == "pending"
    page = client_of(world.bob).get("/p/project-a/alerts/channels/").content.decode()
    assert "Pending" in page
    assert "Send test" in page


def test_the_history_page_lists_what_fired_and_resolved(world):
    rule = make_rule(world.project_a, world.alice, "run_failed", name="train-fails")
    event = engine.fire(rule, Finding("pipeline:train", "pipeline train", "Run train #3 failed"))
    engine.resolve(event, "Run train #4 succeeded.")
    text = client_of(world.bob).get("/p/project-a/alerts/history/?status=resolved").content.decode()
    assert "Run train #3 failed" in text
    assert "Run train #4 succeeded." in text
    assert "Resolved" in text
    text = client_of(world.bob).get("/p/project-a/alerts/history/?status=firing").content.decode()
    assert "Run train #3 failed" not in text


def test_other_tenants_pages_are_404(world):
    rule = make_rule(world.project_a, world.alice, "run_failed")
    channel = rule.channels.get()
    client = client_of(world.charlie)
    for url in ("/p/project-a/alerts/", "/p/project-a/alerts/channels/", "/p/project-a/alerts/history/",
                f"/p/project-a/alerts/rules/{rule.pk}/"):  # fmt: skip
        assert client.get(url).status_code == 404, url
    assert client.post(f"/p/project-a/alerts/channels/{channel.pk}/test/").status_code == 404
    # and project B's own page does not reach A's rows
    assert client.get(f"/p/project-b/alerts/rules/{rule.pk}/").status_code == 404
    assert not Delivery.objects.exists()
