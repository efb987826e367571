"""Sending one `Delivery`: the message of its event (or a test) in each channel's format.

Payloads, as each receiver documents them:
- generic webhook: our JSON (`payload()`), with `X-Portal-Signature: sha256=<hex HMAC of the body>` when the
  channel has a secret;
- Slack incoming webhook: `{"text": …, "blocks": [{"type": "section", "text": {"type": "mrkdwn", …}}]}`;
- WeCom group robot: `{"msgtype": "markdown", "markdown": {"content": …}}` (answers `{"errcode": 0}`);
- DingTalk robot: `{"msgtype": "markdown", "markdown": {"title": …, "text": …}}`, and with a signing secret the
  URL gains `timestamp` (ms) and `sign` = base64(HMAC-SHA256(secret, "<timestamp>\\n<secret>")), URL-quoted
  (answers `{"errcode": 0}`).
In-app notifications go to the project's members (or the usernames listed), email through Django's mail settings.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import quote_plus, urlsplit

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.services import notify
from apps.alerts.models import Channel, Delivery
from portal.lib.outbound import private_address, refusal

MAX_TRIES = 4  # a delivery is tried this often before it stays failed
TIMEOUT = 10.0  # seconds per webhook request; the task has its own time limit above it
MAX_ERROR_CHARS = 1000


class SendError(Exception):
    """The receiver refused or could not be reached (the message says how)."""


def absolute(url: str) -> str:
    return f"{settings.SITE_URL.rstrip('/')}{url}" if url.startswith("/") else url


def title_of(delivery: Delivery) -> str:
    event = delivery.event
    if event is None:
        return _("[TEST] Alert channel %(name)s of %(project)s") % {
            "name": delivery.channel.name, "project": delivery.project.name,
        }  # fmt: skip
    words = {"rule": event.rule.name, "subject": event.subject, "project": delivery.project.name}
    if delivery.kind == Delivery.Kind.RESOLVED:
        return _("[RESOLVED] %(rule)s: %(subject)s (%(project)s)") % words
    return _("[FIRING] %(rule)s: %(subject)s (%(project)s)") % words


def body_of(delivery: Delivery) -> str:
    event = delivery.event
    if event is None:
        return _("A test message: this channel works.")
    if delivery.kind == Delivery.Kind.RESOLVED:
        return event.resolve_message or _("Cleared: %(message)s") % {"message": event.message}
    return event.message


def payload(delivery: Delivery) -> dict[str, Any]:
    """The generic webhook's JSON."""
    event = delivery.event
    data: dict[str, Any] = {
        "status": delivery.kind,
        "title": title_of(delivery),
        "message": body_of(delivery),
        "project": delivery.project.slug,
        "channel": delivery.channel.name,
    }
    if event is not None:
        data.update(
            rule=event.rule.name, kind=event.rule.kind, key=event.key, subject=event.subject, value=event.value,
            url=absolute(event.url) if event.url else "", started_at=event.started_at.isoformat(),
            resolved_at=event.resolved_at.isoformat() if event.resolved_at else None, count=event.count,
        )  # fmt: skip
    return data


def markdown(delivery: Delivery) -> str:
    lines = [f"**{title_of(delivery)}**", "", body_of(delivery)]
    if delivery.event is not None and delivery.event.url:
        lines += ["", f"[{_('Open in the portal')}]({absolute(delivery.event.url)})"]
    return "\n".join(lines)


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signature of a robot message (URL-quoted, as it goes into the query string)."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


def request_of(channel: Channel, delivery: Delivery) -> tuple[str, bytes, dict[str, str]]:
    """(URL, body, headers) of a webhook delivery, in the format of the channel's kind."""
    url = channel.url or ""
    headers = {"Content-Type": "application/json"}
    if channel.kind == Channel.Kind.SLACK:
        text = f"*{title_of(delivery)}*\n{body_of(delivery)}"
        if delivery.event is not None and delivery.event.url:
            text += f"\n<{absolute(delivery.event.url)}|{_('Open in the portal')}>"
        data: dict[str, Any] = {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}
    elif channel.kind == Channel.Kind.WECOM:
        data = {"msgtype": "markdown", "markdown": {"content": markdown(delivery)}}
    elif channel.kind == Channel.Kind.DINGTALK:
        data = {"msgtype": "markdown", "markdown": {"title": title_of(delivery), "text": markdown(delivery)}}
        if channel.secret:
            stamp = int(time.time() * 1000)
            url += (
                "&" if urlsplit(url).query else "?"
            ) + f"timestamp={stamp}&sign={dingtalk_sign(channel.secret, stamp)}"
    else:
        data = payload(delivery)
    body = json.dumps(data, ensure_ascii=False).encode()
    if channel.kind == Channel.Kind.WEBHOOK and channel.secret:
        signature = hmac.new(channel.secret.encode(), body, hashlib.sha256).hexdigest()
        headers["X-Portal-Signature"] = f"sha256={signature}"
    return url, body, headers


def _post(channel: Channel, delivery: Delivery) -> None:
    url, body, headers = request_of(channel, delivery)
    if found := private_address(url):
        raise SendError(refusal(found))
    try:  # a redirect is an answer (3xx fails below), never followed: it could point anywhere
        response = requests.post(url, data=body, headers=headers, timeout=TIMEOUT, allow_redirects=False)
    except requests.RequestException as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None
    if response.status_code >= 300:
        raise SendError(f"HTTP {response.status_code}: {response.text[:300]}")
    if channel.kind in (Channel.Kind.WECOM, Channel.Kind.DINGTALK):  # errors come back as 200 with an errcode
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if isinstance(answer, dict) and answer.get("errcode", 0) != 0:
            raise SendError(f"errcode {answer.get('errcode')}: {answer.get('errmsg', '')}")


def members(project: Any, usernames: list[str]) -> list[Any]:
    users = get_user_model().objects.filter(memberships__project=project, is_active=True).order_by("pk")
    if usernames:
        users = users.filter(username__in=usernames)
    return list(users)


def _send_email(channel: Channel, delivery: Delivery) -> None:
    addresses = channel.recipient_list() or [u.email for u in members(delivery.project, []) if u.email]
    if not addresses:
        raise SendError(_("No recipient has an email address."))
    text = body_of(delivery)
    if delivery.event is not None and delivery.event.url:
        text += "\n\n" + absolute(delivery.event.url)
    try:
        send_mail(title_of(delivery), text, settings.DEFAULT_FROM_EMAIL, addresses)
    except Exception as exc:  # smtplib's and socket's errors alike: recorded, retried
        raise SendError(f"{type(exc).__name__}: {exc}") from None


def _send_inapp(channel: Channel, delivery: Delivery) -> None:
    users = members(delivery.project, channel.recipient_list())
    if not users:
        raise SendError(_("None of the recipients is a member of the project."))
    url = delivery.event.url if delivery.event is not None else ""
    for user in users:
        notify(user, f"{title_of(delivery)} — {body_of(delivery)}", url=url)


def send(delivery: Delivery) -> None:
    """Send one delivery now (raises SendError)."""
    channel = delivery.channel
    if channel.kind == Channel.Kind.INAPP:
        _send_inapp(channel, delivery)
    elif channel.kind == Channel.Kind.EMAIL:
        _send_email(channel, delivery)
    else:
        _post(channel, delivery)


def attempt(delivery_id: int, *, tries: int = MAX_TRIES) -> str:
    """One try of a pending delivery: "sent", "retry" (failed, tries left), "failed" (the last of `tries` failed),
    or "skipped" (not pending: another worker has it, or it was done). Claimed by a conditional update, so a message
    queued twice goes once."""
    claimed = Delivery.objects.filter(pk=delivery_id, status=Delivery.Status.PENDING).update(
        status=Delivery.Status.SENDING
    )
    if not claimed:
        return "skipped"
    delivery = Delivery.objects.select_related("channel", "project", "event__rule").get(pk=delivery_id)
    attempts = delivery.attempts + 1
    try:
        send(delivery)
    except SendError as exc:
        final = attempts >= tries
        status = Delivery.Status.FAILED if final else Delivery.Status.PENDING
        Delivery.objects.filter(pk=delivery_id).update(
            status=status, attempts=attempts, error=str(exc)[:MAX_ERROR_CHARS]
        )
        return "failed" if final else "retry"
    Delivery.objects.filter(pk=delivery_id).update(
        status=Delivery.Status.SENT, attempts=attempts, error="", sent_at=timezone.now()
    )
    return "sent"
