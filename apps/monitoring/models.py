"""Drift monitors of inference services and the reports their runs write."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.querysets import TenantQuerySet


class DriftMonitor(models.Model):
    """Watches one service's inputs: every `interval_minutes`, the inputs the service logged in the last `window_hours`
    (payload logging) are compared per feature with the reference data, the dataset version the model was trained on
    (found through lineage, or `reference_version` when set). A report whose score reaches `threshold` is drifted."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="drift_monitors")
    service = models.ForeignKey(
        "serving.InferenceService", on_delete=models.CASCADE, related_name="drift_monitors", verbose_name=_("service")
    )
    reference_version = models.ForeignKey(
        "datasets.DatasetVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("reference dataset version"),
        help_text=_("Empty: the version the served model was trained on, found through lineage."),
    )
    target_column = models.CharField(
        _("target column"), max_length=200, blank=True, help_text=_("The reference's label column, left out.")
    )
    threshold = models.FloatField(
        _("threshold"), default=0.2, validators=[MinValueValidator(0.001), MaxValueValidator(100)]
    )
    window_hours = models.PositiveIntegerField(
        _("window (hours)"), default=24, validators=[MinValueValidator(1), MaxValueValidator(24 * 90)]
    )
    min_rows = models.PositiveIntegerField(
        _("minimum rows"), default=30, validators=[MinValueValidator(1), MaxValueValidator(1_000_000)]
    )
    interval_minutes = models.PositiveIntegerField(
        _("check every (minutes)"), default=60, validators=[MinValueValidator(1), MaxValueValidator(7 * 24 * 60)]
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    next_run_at = models.DateTimeField(default=timezone.now)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "service__name"]
        constraints = [models.UniqueConstraint(fields=["service"], name="monitoring_one_monitor_per_service")]

    def __str__(self) -> str:
        return f"drift of {self.service}"

    @property
    def interval(self) -> timedelta:
        return timedelta(minutes=self.interval_minutes)

    def latest_report(self) -> DriftReport | None:
        return self.reports.order_by("-created_at", "-pk").first()


class DriftReport(models.Model):
    """One comparison of a monitor's window with its reference: per feature its kind and scores (PSI for every
    feature; KS statistic and p-value for numbers, chi-square and p-value for categories), the overall score (the
    largest feature PSI) and whether it reached the threshold. `skipped` when the window had too few rows."""

    class Status(models.TextChoices):
        OK = "ok", _("No drift")
        DRIFTED = "drifted", _("Drifted")
        SKIPPED = "skipped", _("Skipped")
        FAILED = "failed", _("Failed")

    monitor = models.ForeignKey(DriftMonitor, on_delete=models.CASCADE, related_name="reports")
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(_("status"), max_length=10, choices=Status.choices)
    message = models.TextField(_("message"), blank=True)
    reference_version = models.ForeignKey(
        "datasets.DatasetVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reference_rows = models.PositiveIntegerField(default=0)
    current_rows = models.PositiveIntegerField(default=0)
    window_start = models.DateTimeField(null=True, blank=True)
    features = models.JSONField(default=dict, blank=True)
    score = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(default=0.2)

    tenant_path = "monitor__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["monitor", "created_at"], name="monitoring_report_at_idx")]

    def __str__(self) -> str:
        return f"{self.monitor} @ {self.created_at:%Y-%m-%d %H:%M}: {self.status}"

    @property
    def drifted(self) -> bool:
        return self.status == self.Status.DRIFTED

    @property
    def project(self):
        return self.monitor.project
