from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.jobs.models import JobTemplate, Pipeline, PipelineRun, Schedule, TaskRun
from apps.projects.api.base import request_token
from apps.projects.api.serializers import VisibleProjectField


class JobTemplateSerializer(serializers.ModelSerializer):
    project = VisibleProjectField(required=False, allow_null=True)
    ref = serializers.CharField(read_only=True)

    class Meta:
        model = JobTemplate
        fields = [
            "id", "project", "slug", "version", "ref", "name", "category", "description", "image", "command",
            "workdir", "env", "args_schema", "resources", "kind", "framework", "replicas", "timeout", "created_at",
        ]  # fmt: skip
        read_only_fields = ["version", "created_at"]


class PipelineSerializer(serializers.ModelSerializer):
    project = VisibleProjectField()
    spec = serializers.JSONField(help_text=_("Nodes, edges (depends_on), env, parallelism, priority, failure policy."))

    class Meta:
        model = Pipeline
        fields = ["id", "project", "name", "description", "spec", "layout", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]
        validators: list[Any] = []  # uniqueness is the service's (one message for pages and API)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields


class PipelineYamlSerializer(serializers.Serializer):
    project = VisibleProjectField()
    yaml = serializers.CharField(help_text=_("A pipeline exported as YAML (apiVersion portal/v1, kind Pipeline)."))


class TaskRunSerializer(serializers.ModelSerializer):
    duration = serializers.FloatField(read_only=True)

    class Meta:
        model = TaskRun
        fields = [
            "id", "run", "node", "attempt", "status", "reason", "waiting_reason", "not_before", "exit_code",
            "cache_key", "cached_from", "output_dir", "output_digest", "resources", "usage", "created_at",
            "queued_at", "started_at", "finished_at", "duration",
        ]  # fmt: skip
        read_only_fields = fields


class PipelineRunSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = PipelineRun
        fields = [
            "id", "project", "pipeline", "pipeline_name", "number", "status", "reason", "trigger", "schedule",
            "logical_date", "rerun_of", "priority", "created_by", "created_at", "started_at", "finished_at",
            "progress", "spec",
        ]  # fmt: skip
        read_only_fields = fields

    def get_progress(self, run: PipelineRun) -> dict[str, int]:
        done = getattr(run, "done_count", None)
        total = len(run.spec.get("nodes", []))
        if done is None:
            from apps.jobs.models import TASK_FINISHED

            done = len({t.node for t in run.tasks.all() if t.status in TASK_FINISHED})
        return {"done": done, "total": total}


class StartRunSerializer(serializers.Serializer):
    pass


class RerunSerializer(serializers.Serializer):
    node = serializers.CharField(required=False, help_text=_("Re-run this node and what depends on it."))


class ScheduleSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Schedule
        fields = [
            "id", "project", "pipeline", "cron", "timezone", "start_date", "catchup", "max_active_runs",
            "depends_on_past", "enabled", "last_logical_date", "created_at",
        ]  # fmt: skip
        read_only_fields = ["project", "last_logical_date", "created_at"]

    def validate_pipeline(self, pipeline: Pipeline) -> Pipeline:
        request = self.context["request"]
        if not Pipeline.objects.for_user(request.user, token=request_token(request)).filter(pk=pipeline.pk).exists():
            raise serializers.ValidationError(_("No such pipeline."))
        return pipeline
