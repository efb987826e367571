from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.labeling.models import LabelingProject
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class LabelingProjectSerializer(StrictModelSerializer):
    """A labeling project. On create: the dataset version (its id, in the same project), the kind, and the labels
    (or, for kind "xml", the label configuration, validated by Label Studio). Never Label Studio's token."""

    project = VisibleProjectField()
    dataset_version = serializers.IntegerField(
        source="dataset_version_id", help_text=_("The id of a dataset version of the same project.")
    )
    dataset = serializers.CharField(source="dataset_version.ref", read_only=True)
    labels = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
    label_config = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)

    class Meta:
        model = LabelingProject
        fields = [
            "id", "project", "name", "description", "dataset_version", "dataset", "kind", "labels", "text_column",
            "label_config", "ls_project_id", "status", "reason", "task_count", "progress", "synced_at", "created_at",
        ]  # fmt: skip
        read_only_fields = ["ls_project_id", "status", "reason", "task_count", "progress", "synced_at", "created_at"]
        validators: list[Any] = []  # uniqueness is the service's (one message for pages and API)
        extra_kwargs = {"name": {"validators": []}, "kind": {"validators": []}}


class AttachServiceSerializer(StrictSerializer):
    """The inference service (its id, in the labeling project's project) to attach as Label Studio's ML backend."""

    service = serializers.IntegerField(min_value=1, help_text=_("The id of an inference service of the same project."))


class AnnotationSerializer(StrictSerializer):
    """One annotation from the annotate page (or any client): the task (its portal id, from `next-task`), the
    regions in Label Studio's result format, or `was_cancelled` to skip the task. Sent again for the same task, it
    updates the caller's annotation."""

    task = serializers.IntegerField(min_value=1, help_text=_("The portal id of a task of this labeling project."))
    result = serializers.JSONField(required=False, default=list, help_text=_("Label Studio's list of regions."))
    was_cancelled = serializers.BooleanField(required=False, default=False, help_text=_("Skip the task."))
    lead_time = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=10**7, help_text=_("Seconds spent on the task.")
    )


class TrainingPipelineSerializer(StrictSerializer):
    """The pipeline "train on these labels" starts (its id, in the same project; null clears it)."""

    pipeline = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        help_text=_("A pipeline of the same project whose dataset argument names the labels."),
    )
