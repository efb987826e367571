"""Alert rules of a project, the channels they send to, what fired (`AlertEvent`) and each message sent (`Delivery`).

What a rule watches is its `kind`, a key of the registry in apps/alerts/kinds.py, with that kind's `params`. The
engine (apps/alerts/engine.py) opens one `AlertEvent` per condition (`key`) while it holds and closes it when it
clears; the senders (apps/alerts/senders.py) deliver one `Delivery` per channel and message.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.querysets import TenantQuerySet
from portal.lib.fields import EncryptedText


class Channel(models.Model):
    """Where a project's alerts go: the portal's own notifications, email, or a webhook (generic JSON or a Slack,
    WeCom or DingTalk robot). A webhook's URL and signing secret are stored encrypted and never shown back."""

    class Kind(models.TextChoices):
        INAPP = "inapp", _("In-app notification")
        EMAIL = "email", _("Email")
        WEBHOOK = "webhook", _("Webhook (generic JSON)")
        SLACK = "slack", _("Slack incoming webhook")
        WECOM = "wecom", _("WeCom group robot")
        DINGTALK = "dingtalk", _("DingTalk robot")

    WEBHOOKS = frozenset({Kind.WEBHOOK, Kind.SLACK, Kind.WECOM, Kind.DINGTALK})

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="alert_channels")
    name = models.CharField(_("name"), max_length=80, validators=[slug_validator])
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    # In-app: usernames of members (blank: every member); email: addresses (blank: every member's address).
    recipients = models.TextField(_("recipients"), blank=True)
    url = EncryptedText(_("webhook URL"), null=True, blank=True)
    # DingTalk: the robot's signing secret (SEC…); generic webhook: the key of the X-Portal-Signature HMAC.
    secret = EncryptedText(_("signing secret"), null=True, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="alerts_channel_name_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_webhook(self) -> bool:
        return self.kind in self.WEBHOOKS

    def recipient_list(self) -> list[str]:
        return [r for r in (part.strip() for part in self.recipients.replace("\n", ",").split(",")) if r]


class AlertRule(models.Model):
    """What to watch in a project (`kind` and its `params`, apps/alerts/kinds.py) and which channels hear of it."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(_("name"), max_length=80, validators=[slug_validator])
    kind = models.CharField(_("kind"), max_length=40)
    params = models.JSONField(_("parameters"), default=dict, blank=True)
    channels = models.ManyToManyField(Channel, related_name="rules", blank=True, verbose_name=_("channels"))
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="alerts_rule_name_unique")]

    def __str__(self) -> str:
        return self.name

    def kind_label(self) -> str:
        from apps.alerts.kinds import KINDS

        kind = KINDS.get(self.kind)
        return str(kind.label) if kind else self.kind


class AlertEvent(models.Model):
    """One condition of a rule from the moment it fired to the moment it cleared: one row however many evaluations
    saw it (`count`), at most one firing row per rule and key (the database refuses a second)."""

    class Status(models.TextChoices):
        FIRING = "firing", _("Firing")
        RESOLVED = "resolved", _("Resolved")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="alert_events")
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    key = models.CharField(max_length=200)  # what fired: "pipeline:train", "service:12", "quota:gpu"…
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.FIRING)
    subject = models.CharField(_("subject"), max_length=200)
    message = models.TextField(_("message"), blank=True)
    resolve_message = models.TextField(blank=True)
    value = models.FloatField(null=True, blank=True)  # the measured number, for threshold kinds
    url = models.CharField(max_length=500, blank=True)  # the page of what fired, relative to SITE_URL
    count = models.PositiveIntegerField(default=1)  # evaluations or events that saw it while it fired
    started_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-pk"]
        indexes = [models.Index(fields=["project", "-started_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "key"], condition=Q(status="firing"), name="alerts_event_one_firing_per_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} · {self.subject} ({self.status})"


class Delivery(models.Model):
    """One message to one channel: an alert firing or resolved, or a test. Sent by a Celery task with retries;
    what went wrong is kept."""

    class Kind(models.TextChoices):
        FIRING = "firing", _("Firing")
        RESOLVED = "resolved", _("Resolved")
        TEST = "test", _("Test")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENDING = "sending", _("Sending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="alert_deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.get_kind_display()} → {self.channel} ({self.status})"
