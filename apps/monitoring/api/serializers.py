from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.monitoring.models import DriftMonitor, DriftReport
from apps.projects.api.serializers import StrictModelSerializer, VisibleProjectField


class DriftMonitorSerializer(StrictModelSerializer):
    """A service's drift monitor. `reference_version`: a dataset version of the project (its id or "name@number");
    null finds the model's training data through lineage."""

    project = VisibleProjectField()
    service = serializers.CharField(help_text=_("The service's name (or id)."))
    reference_version = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, help_text=_("A dataset version: id or name@number.")
    )
    latest_report = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = DriftMonitor
        fields = [
            "id", "project", "service", "reference_version", "target_column", "threshold", "window_hours", "min_rows",
            "interval_minutes", "enabled", "next_run_at", "last_run_at", "latest_report", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["next_run_at", "last_run_at", "created_at"]
        validators: list[Any] = []  # the service layer's (one message for pages and API)
        extra_kwargs = {
            name: {"validators": []} for name in ("threshold", "window_hours", "min_rows", "interval_minutes")
        }

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            for name in ("project", "service"):  # a monitor watches one service for good
                fields[name].read_only = True
        return fields

    def to_representation(self, instance: DriftMonitor) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["service"] = instance.service.name
        data["reference_version"] = instance.reference_version.ref if instance.reference_version_id else None
        return data

    def get_latest_report(self, monitor: DriftMonitor) -> dict[str, Any] | None:
        report = monitor.latest_report()
        return DriftReportSerializer(report).data if report is not None else None


class DriftReportSerializer(serializers.ModelSerializer):
    reference_version = serializers.SerializerMethodField()

    class Meta:
        model = DriftReport
        fields = [
            "id", "monitor", "created_at", "status", "message", "reference_version", "reference_rows", "current_rows",
            "window_start", "features", "score", "threshold",
        ]  # fmt: skip
        read_only_fields = fields

    def get_reference_version(self, report: DriftReport) -> str | None:
        return report.reference_version.ref if report.reference_version_id else None
