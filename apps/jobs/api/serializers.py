from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.jobs.dag import ENV_NAME_RE, MAX_TIMEOUT, resource_message
from apps.jobs.diagnosis import CAUSES, failed_attempts
from apps.jobs.forms import registry_credential_errors
from apps.jobs.models import Image, JobTemplate, Pipeline, PipelineRun, Schedule, TaskRun
from apps.jobs.schedules import next_dates
from apps.projects.api.base import request_token
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField
from apps.runtime.kubernetes.manifests import FRAMEWORKS
from apps.runtime.workload import Resources


def _framework_choices() -> list[str]:
    return sorted(FRAMEWORKS)


class JobTemplateSerializer(StrictModelSerializer):
    project = VisibleProjectField(required=False, allow_null=True)
    ref = serializers.CharField(read_only=True)
    # The frameworks the runtimes build (the Kubeflow operators', Volcano, Ray); empty for a plain job. Checked here
    # rather than at the first Kubernetes dry run, which is where a typo used to surface.
    framework = serializers.ChoiceField(
        choices=_framework_choices(),
        required=False,
        allow_blank=True,
        help_text=_("Distributed framework (empty: none)."),
        error_messages={
            "invalid_choice": _("“{input}” is not a framework the runtime supports. Allowed: %(allowed)s, or empty.")
            % {"allowed": ", ".join(_framework_choices())}
        },
    )

    class Meta:
        model = JobTemplate
        fields = [
            "id", "project", "slug", "version", "ref", "name", "category", "description", "image", "command",
            "workdir", "env", "args_schema", "resources", "kind", "framework", "replicas", "strategy", "timeout",
            "side_effects", "preemptible", "created_at",
        ]  # fmt: skip
        read_only_fields = ["version", "created_at"]
        extra_kwargs = {"timeout": {"min_value": 1, "max_value": MAX_TIMEOUT}}
        # (project, slug, version) is unique, but the version is the service's to choose: posting a slug that exists
        # makes its next version (services.create_template), which the default unique-together check refused.
        validators: list[Any] = []

    def validate_command(self, value: Any) -> list[str]:
        # A string would be run character by character ("python" as "p", "y", ...): the entrypoint is a list.
        if value is None:  # a multipart "null": the strict null check names it
            return value
        if not isinstance(value, list) or not all(isinstance(part, str) for part in value):
            raise serializers.ValidationError(
                _('Give the entrypoint as a list of strings, e.g. ["python", "train.py"].')
            )
        return value

    def validate_resources(self, value: Any) -> dict[str, Any]:
        """The defaults every node starts from, checked as a node's own would be (no negative, NaN or absurd
        amounts: they failed only when a run started)."""
        if value is None:
            return value
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("Must be a mapping of cpu, memory and gpu."))
        errors = {}
        for field, amount in value.items():
            try:
                Resources.parse({field: amount})
            except ValueError:
                errors[field] = [resource_message(field, amount)]
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_env(self, value: Any) -> dict[str, str]:
        if value is None:
            return value
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and ENV_NAME_RE.match(k) and isinstance(v, str) for k, v in value.items()
        ):
            raise serializers.ValidationError(_("Must be a mapping of variable name to text."))
        return value


class PipelineSerializer(StrictModelSerializer):
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


class PipelineYamlSerializer(StrictSerializer):
    project = VisibleProjectField()
    yaml = serializers.CharField(help_text=_("A pipeline exported as YAML (apiVersion portal/v1, kind Pipeline)."))


class DiagnosisSerializer(StrictSerializer):
    """Why a failed attempt failed and what to try next (docs/diagnosis.md), in the request's language."""

    cause = serializers.ChoiceField(choices=CAUSES, help_text=_("The cause's code, e.g. oom, module_not_found."))
    title = serializers.CharField(help_text=_("The cause in words, e.g. “out of memory”."))
    message = serializers.CharField(help_text=_("The cause with what was seen: “out of memory: …”."))
    suggestion = serializers.CharField(help_text=_("The next step to try."))
    detail = serializers.CharField(help_text=_("What the rule saw: a reason, a log line, a measure."))


class TaskFailureSerializer(DiagnosisSerializer):
    task = serializers.IntegerField(help_text=_("The failed attempt (a task-run id)."))
    node = serializers.CharField()
    attempt = serializers.IntegerField()


class FailureCountSerializer(StrictSerializer):
    cause = serializers.ChoiceField(choices=CAUSES)
    title = serializers.CharField()
    suggestion = serializers.CharField()
    count = serializers.IntegerField(help_text=_("Failed attempts of the project with this cause."))


class ProjectFailuresSerializer(StrictSerializer):
    project = serializers.CharField()
    total = serializers.IntegerField(help_text=_("Failed attempts of the project with a diagnosis."))
    causes = FailureCountSerializer(many=True, help_text=_("Most frequent first."))


class TaskRunSerializer(StrictModelSerializer):
    duration = serializers.FloatField(read_only=True)
    diagnosis = serializers.SerializerMethodField()

    class Meta:
        model = TaskRun
        fields = [
            "id", "run", "node", "attempt", "status", "reason", "waiting_reason", "not_before", "exit_code",
            "cache_key", "cached_from", "output_dir", "output_digest", "resources", "usage", "resource_warnings",
            "created_at", "queued_at", "started_at", "finished_at", "duration", "image_digest", "diagnosis",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(DiagnosisSerializer(allow_null=True))
    def get_diagnosis(self, task: TaskRun) -> dict[str, str] | None:
        return task.diagnosis


class PipelineRunSerializer(StrictModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    progress = serializers.SerializerMethodField()
    failures = serializers.SerializerMethodField()

    class Meta:
        model = PipelineRun
        fields = [
            "id", "project", "pipeline", "pipeline_name", "number", "status", "reason", "trigger", "schedule",
            "logical_date", "rerun_of", "priority", "created_by", "created_at", "started_at", "finished_at",
            "progress", "failures", "spec",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(TaskFailureSerializer(many=True))
    def get_failures(self, run: PipelineRun) -> list[dict[str, Any]]:
        """Its failed attempts' diagnoses, oldest first (prefetched by the viewset as `failed_attempts`)."""
        failed = getattr(run, "failed_attempts", None)
        if failed is None:
            failed = failed_attempts(run)
        return [{"task": t.pk, "node": t.node, "attempt": t.attempt, **t.diagnosis} for t in failed if t.diagnosis]

    def get_progress(self, run: PipelineRun) -> dict[str, int]:
        done, total = run.progress()
        return {"done": done, "total": total}


class BackfillSerializer(StrictSerializer):
    start = serializers.DateTimeField(help_text=_("The first date to run (included)."))
    end = serializers.DateTimeField(help_text=_("The last date to run (included; not in the future)."))


class DuplicateSerializer(StrictSerializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=100,
                                 help_text=_("The copy's name; empty: the original's with -copy."))  # fmt: skip


class StartRunSerializer(StrictSerializer):
    ignore_cache = serializers.BooleanField(
        required=False,
        default=False,
        help_text=_("Run every node again, even those whose inputs match an earlier successful task."),
    )


class UsagePointsSerializer(StrictSerializer):
    t = serializers.ListField(child=serializers.IntegerField(), help_text=_("Times, in ms since the epoch."))
    v = serializers.ListField(child=serializers.FloatField())


class ResourceWarningSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["low_gpu", "memory_near_limit"])
    replica = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class TaskUsageSerializer(StrictSerializer):
    task = serializers.IntegerField()
    node = serializers.CharField()
    attempt = serializers.IntegerField()
    replica = serializers.CharField(
        help_text=_('The replica ("0" alone; "master-0", "worker-1"… of a distributed task).')
    )
    status = serializers.CharField()
    total = serializers.IntegerField(help_text=_("Samples stored (before downsampling)."))
    cpu = UsagePointsSerializer(help_text=_("CPU, in percent of one core."))
    rss = UsagePointsSerializer(help_text=_("Resident memory, in bytes."))
    gpu = UsagePointsSerializer(allow_null=True, help_text=_("GPU utilisation in percent; null without GPUs."))
    gpu_memory = UsagePointsSerializer(allow_null=True, help_text=_("GPU memory in bytes; null without GPUs."))
    warnings = ResourceWarningSerializer(many=True, help_text=_("Low GPU utilisation, memory near its limit."))


class RunUsageSerializer(StrictSerializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    active = serializers.BooleanField(help_text=_("The run has not finished: more samples may come."))
    points = serializers.IntegerField()
    tasks = TaskUsageSerializer(many=True)


LOG_PAGE_MAX = 5000
LOG_QUERY_MAX = 200


class LogQuerySerializer(StrictSerializer):
    """The query of a run's log history (`GET /runs/{id}/logs/`)."""

    after = serializers.IntegerField(
        required=False, default=0, min_value=0, help_text=_("Lines after this line id (the previous page's last).")
    )
    limit = serializers.IntegerField(required=False, default=1000, min_value=1, max_value=LOG_PAGE_MAX)
    node = serializers.CharField(required=False, allow_blank=True, max_length=200, help_text=_("Lines of this node."))
    replica = serializers.CharField(required=False, allow_blank=True, max_length=50, help_text=_("Of this replica."))
    task = serializers.IntegerField(required=False, min_value=1, help_text=_("Of this attempt (a task-run id)."))
    q = serializers.CharField(
        required=False, max_length=LOG_QUERY_MAX, help_text=_("Lines containing this text (ignoring case).")
    )


class LogLineSerializer(StrictSerializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField(help_text=_("The attempt (task-run id)."))
    node = serializers.CharField()
    attempt = serializers.IntegerField()
    replica = serializers.CharField()
    seq = serializers.IntegerField(help_text=_("The line's number within its attempt, from 1, without gaps."))
    ts = serializers.DateTimeField()
    stream = serializers.CharField()
    text = serializers.CharField()


class LogPageSerializer(StrictSerializer):
    next = serializers.URLField(allow_null=True, help_text=_("The next page, or null when this one is the last."))
    results = LogLineSerializer(many=True)


class RerunSerializer(StrictSerializer):
    node = serializers.CharField(required=False, help_text=_("Re-run this node and what depends on it."))


class ScheduleSerializer(StrictModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    next_runs = serializers.SerializerMethodField(help_text=_("The next dates it fires at (none while paused)."))

    class Meta:
        model = Schedule
        fields = [
            "id", "project", "pipeline", "cron", "timezone", "start_date", "catchup", "max_active_runs",
            "depends_on_past", "enabled", "last_logical_date", "created_at", "next_runs",
        ]  # fmt: skip
        read_only_fields = ["project", "last_logical_date", "created_at"]

    def get_next_runs(self, schedule: Schedule) -> list[datetime]:
        return next_dates(schedule, 5)

    def validate_pipeline(self, pipeline: Pipeline) -> Pipeline:
        request = self.context["request"]
        if not Pipeline.objects.for_user(request.user, token=request_token(request)).filter(pk=pipeline.pk).exists():
            raise serializers.ValidationError(_("No such pipeline."))
        return pipeline


class ImageSerializer(StrictModelSerializer):
    """An image and its registry credentials. `registry_password` is write-only: omitted or empty keeps the stored
    one, null removes it; `has_registry_password` says whether one is stored."""

    project = VisibleProjectField()
    registry_password = serializers.CharField(
        write_only=True, required=False, allow_blank=True, allow_null=True, trim_whitespace=False,
        style={"input_type": "password"},
    )  # fmt: skip
    has_registry_password = serializers.SerializerMethodField()

    class Meta:
        model = Image
        fields = [
            "id", "project", "name", "description", "registry", "registry_username", "registry_password",
            "has_registry_password", "created_at",
        ]  # fmt: skip
        read_only_fields = ["created_at"]

    def get_has_registry_password(self, image: Image) -> bool:
        return bool(image.registry_password)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        def current(field: str) -> str:
            return attrs[field] if field in attrs else getattr(self.instance, field, "") or ""

        if "registry_password" in attrs and attrs["registry_password"] is None:
            has_password = False
        else:
            has_password = bool(attrs.get("registry_password")) or bool(current("registry_password"))
        errors = registry_credential_errors(current("registry"), current("registry_username"), has_password)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    @staticmethod
    def _with_password(attrs: dict[str, Any]) -> dict[str, Any]:
        """Only a given password is written (null: removed), so an update without one keeps the stored one."""
        attrs = dict(attrs)
        password = attrs.pop("registry_password", "")
        if password is None:
            attrs["registry_password"] = ""
        elif password:
            attrs["registry_password"] = password
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Image:
        return super().create(self._with_password(validated_data))

    def update(self, instance: Image, validated_data: dict[str, Any]) -> Image:
        return super().update(instance, self._with_password(validated_data))
