"""Messages as each receiver documents them, checked against a real local HTTP server; email through Django's
locmem backend; in-app notifications; failures recorded and retried."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import quote_plus

import pytest
from celery.exceptions import Retry
from django.core import mail

from apps.accounts.models import Notification
from apps.alerts import engine, senders, services
from apps.alerts.kinds import Finding
from apps.alerts.models import Channel, Delivery
from apps.alerts.senders import MAX_TRIES
from apps.alerts.tasks import deliver
from tests.alerts.factories import channel as make_channel
from tests.alerts.factories import rule as make_rule

pytestmark = pytest.mark.django_db


def fire_one(world, channel):
    rule = make_rule(world.project_a, world.alice, "run_failed", channels=[channel], name="train-fails")
    event = engine.fire(rule, Finding("pipeline:train", "pipeline train", "Run train #3 failed: a: exit 1",
                                      url="/p/project-a/runs/3/"))  # fmt: skip
    return Delivery.objects.get(event=event, channel=channel)


def test_a_generic_webhook_gets_the_json_payload_signed(world, receiver):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"{receiver.url}/hook",
                           secret="k3y")  # fmt: skip
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "sent"
    (request,) = receiver.requests
    body = request.json()
    assert request.path == "/hook"
    assert request.headers["content-type"] == "application/json"
    assert body["status"] == "firing"
    assert body["rule"] == "train-fails"
    assert body["kind"] == "run_failed"
    assert body["project"] == "project-a"
    assert body["subject"] == "pipeline train"
    assert body["key"] == "pipeline:train"
    assert body["message"] == "Run train #3 failed: a: exit 1"
    assert body["url"].endswith("/p/project-a/runs/3/")
    expected = hmac.new(b"k3y", request.body, hashlib.sha256).hexdigest()
    assert request.headers["x-portal-signature"] == f"sha256={expected}"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.error) == ("sent", 1, "")


def test_slack_gets_text_and_a_mrkdwn_block(world, receiver):
    receiver.answer = b"ok"
    channel = make_channel(world.project_a, world.alice, Channel.Kind.SLACK, url=f"{receiver.url}/services/T/B/x")
    assert senders.attempt(fire_one(world, channel).pk, tries=1) == "sent"
    body = receiver.requests[0].json()
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith("*[FIRING] train-fails: pipeline train (Project A)*\nRun train #3 failed")
    assert body["blocks"] == [{"type": "section", "text": {"type": "mrkdwn", "text": body["text"]}}]


def test_wecom_gets_a_markdown_message(world, receiver):
    channel = make_channel(
        world.project_a, world.alice, Channel.Kind.WECOM, url=f"{receiver.url}/cgi-bin/webhook/send?key=abc"
    )
    assert senders.attempt(fire_one(world, channel).pk, tries=1) == "sent"
    request = receiver.requests[0]
    body = request.json()
    assert request.query == {"key": "abc"}
    assert body["msgtype"] == "markdown"
    assert set(body) == {"msgtype", "markdown"}
    assert set(body["markdown"]) == {"content"}
    assert body["markdown"]["content"].startswith("**[FIRING] train-fails: pipeline train (Project A)**")
    assert "Run train #3 failed: a: exit 1" in body["markdown"]["content"]


def test_dingtalk_gets_markdown_signed_as_its_docs_say(world, receiver):
    secret = "SEC0123456789abcdef"
    channel = make_channel(world.project_a, world.alice, Channel.Kind.DINGTALK,
                           url=f"{receiver.url}/robot/send?access_token=tok", secret=secret)  # fmt: skip
    assert senders.attempt(fire_one(world, channel).pk, tries=1) == "sent"
    request = receiver.requests[0]
    body = request.json()
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"] == "[FIRING] train-fails: pipeline train (Project A)"
    assert "Run train #3 failed" in body["markdown"]["text"]
    assert request.query["access_token"] == "tok"
    # The receiver's check: HMAC-SHA256 of "<timestamp>\n<secret>" keyed by the secret, base64 (parse_qs unquoted it).
    timestamp = request.query["timestamp"]
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    assert request.query["sign"] == base64.b64encode(digest).decode()
    assert senders.dingtalk_sign(secret, int(timestamp)) == quote_plus(request.query["sign"])


def test_a_robot_errcode_is_a_failure_and_recorded(world, receiver):
    receiver.answer = json.dumps({"errcode": 310000, "errmsg": "sign not match"}).encode()
    channel = make_channel(world.project_a, world.alice, Channel.Kind.DINGTALK, url=f"{receiver.url}/robot/send")
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk) == "retry"
    delivery.refresh_from_db()
    assert delivery.status == "pending"
    assert delivery.attempts == 1
    assert "310000" in delivery.error


def test_the_task_retries_and_leaves_the_last_failure_recorded(world, receiver):
    receiver.status = 500
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"{receiver.url}/hook")
    delivery = fire_one(world, channel)
    for _ in range(MAX_TRIES - 1):
        with pytest.raises(Retry):  # called directly, the task raises what a worker would schedule again
            deliver(delivery.pk)
        delivery.refresh_from_db()
        assert delivery.status == "pending"
    assert deliver(delivery.pk) == "failed"
    assert deliver(delivery.pk) == "skipped"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", MAX_TRIES)
    assert delivery.error.startswith("HTTP 500")
    assert len(receiver.requests) == MAX_TRIES


def test_an_unreachable_webhook_is_recorded(world):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook")
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "failed"
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert "ConnectionError" in delivery.error


def test_a_delivery_is_sent_once_however_often_it_is_queued(world, receiver):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WEBHOOK, url=f"{receiver.url}/hook")
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "sent"
    assert senders.attempt(delivery.pk, tries=1) == "skipped"
    assert len(receiver.requests) == 1


def test_email_goes_through_django_mail(world, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "alerts@portal.test"
    channel = make_channel(
        world.project_a, world.alice, Channel.Kind.EMAIL, recipients="ops@example.com, a@example.com"
    )
    assert senders.attempt(fire_one(world, channel).pk, tries=1) == "sent"
    (message,) = mail.outbox
    assert message.subject == "[FIRING] train-fails: pipeline train (Project A)"
    assert message.to == ["ops@example.com", "a@example.com"]
    assert message.from_email == "alerts@portal.test"
    assert "Run train #3 failed: a: exit 1" in message.body
    assert "/p/project-a/runs/3/" in message.body


def test_email_without_recipients_goes_to_the_members(world, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channel = make_channel(world.project_a, world.alice, Channel.Kind.EMAIL)
    assert senders.attempt(fire_one(world, channel).pk, tries=1) == "sent"
    assert sorted(mail.outbox[0].to) == sorted([world.alice.email, world.bob.email])


def test_in_app_notifies_the_members_and_the_resolved_message_follows(world):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.INAPP)
    delivery = fire_one(world, channel)
    assert senders.attempt(delivery.pk, tries=1) == "sent"
    for user in (world.alice, world.bob):
        note = Notification.objects.get(user=user)
        assert note.message.startswith("[FIRING] train-fails")
        assert note.url == "/p/project-a/runs/3/"
    assert not Notification.objects.filter(user=world.charlie).exists()
    engine.resolve(delivery.event, "Run train #4 succeeded.")
    resolved = Delivery.objects.get(event=delivery.event, kind="resolved")
    assert senders.attempt(resolved.pk, tries=1) == "sent"
    assert Notification.objects.filter(user=world.bob, message__contains="[RESOLVED] train-fails").exists()
    assert Notification.objects.filter(user=world.bob, message__contains="Run train #4 succeeded.").exists()


def test_in_app_to_named_members_only(world):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.INAPP, recipients="bob")
    senders.attempt(fire_one(world, channel).pk, tries=1)
    assert list(Notification.objects.values_list("user__username", flat=True)) == ["bob"]


def test_a_test_message_reaches_the_channel(world, receiver):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.WECOM, url=f"{receiver.url}/send")
    delivery = services.send_test(channel)
    assert delivery.kind == "test"
    assert delivery.event is None
    assert senders.attempt(delivery.pk, tries=1) == "sent"
    content = receiver.requests[0].json()["markdown"]["content"]
    assert "[TEST]" in content
    assert "this channel works" in content


def test_a_disabled_channel_gets_nothing(world):
    channel = make_channel(world.project_a, world.alice, Channel.Kind.INAPP, enabled=False)
    rule = make_rule(world.project_a, world.alice, "run_failed", channels=[channel])
    event = engine.fire(rule, Finding("k", "s", "m"))
    assert not Delivery.objects.filter(event=event).exists()
