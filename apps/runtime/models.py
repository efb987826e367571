"""State of the local runtime: the supervising agent(s) and the workloads handed to them."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


def heartbeat_cutoff():
    """Agents whose last heartbeat is older than this are dead (PORTAL_AGENT_TIMEOUT)."""
    return timezone.now() - timedelta(seconds=settings.PORTAL_AGENT_TIMEOUT)


class Agent(models.Model):
    """A running `manage.py runagent`. Its heartbeat tells the portal it is alive and what it has free."""

    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    address = models.CharField(max_length=100, blank=True, help_text="host:port it listens on for wake-ups")
    capacity = models.JSONField(default=dict)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now, db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-heartbeat_at"]

    def __str__(self) -> str:
        return f"agent {self.hostname}:{self.pid}"


class LocalWorkload(models.Model):
    """A workload for the local runtime: submitted by the orchestrator, claimed and run by an agent."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"

    uid = models.CharField(max_length=100, unique=True)
    spec = models.JSONField()
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING, db_index=True)
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="workloads")
    pids = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return self.uid


class DispatchLock(models.Model):
    """A single row the dispatcher locks, so that two workers never hand out the same capacity."""

    class Meta:
        verbose_name = "dispatch lock"

    def __str__(self) -> str:
        return "dispatch lock"
