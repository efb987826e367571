from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.hpo.models import Study, Trial
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class StudySerializer(StrictModelSerializer):
    """A study. Created from its whole definition (the same shape as its YAML, docs/hpo.md); the service checks it
    and answers every bad field at once."""

    project = VisibleProjectField()
    early_stopping = serializers.JSONField(required=False, help_text=_("{algorithm: median, …} or a name."))
    budget = serializers.JSONField(
        required=False, write_only=True, help_text=_("max_trials, parallel_trials, max_failed_trials, deadline.")
    )
    trial_template = serializers.JSONField(
        write_only=True, help_text=_("{pipeline: <name>, args: …}, {job_template: <slug>, args: …} or {spec: …}.")
    )
    seed = serializers.JSONField(required=False)
    objectives = serializers.JSONField()
    space = serializers.JSONField()
    algorithm = serializers.JSONField(required=False)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    best_trial = serializers.SerializerMethodField()
    trial_counts = serializers.SerializerMethodField()

    class Meta:
        model = Study
        fields = [
            "id", "project", "name", "description", "objectives", "space", "algorithm", "early_stopping",
            "early_stopping_settings", "budget", "max_trials", "parallel_trials", "max_failed_trials", "deadline",
            "seed", "trial_template", "template", "status", "reason", "importance", "best_trial", "trial_counts",
            "created_by", "created_at", "finished_at",
        ]  # fmt: skip
        read_only_fields = [
            "early_stopping_settings", "max_trials", "parallel_trials", "max_failed_trials", "deadline", "template",
            "status", "reason", "importance", "created_at", "finished_at",
        ]  # fmt: skip
        validators: list[Any] = []
        extra_kwargs = {"name": {"validators": []}, "description": {"required": False}}

    def to_representation(self, instance: Study) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["early_stopping"] = {"algorithm": instance.early_stopping, **instance.early_stopping_settings}
        return data

    def get_best_trial(self, study: Study) -> dict[str, Any] | None:
        best = study.best_trials()
        return TrialSerializer(best[0]).data if best else None

    def get_trial_counts(self, study: Study) -> dict[str, int]:
        counts = dict.fromkeys(Trial.Status.values, 0)
        for status in study.trials.values_list("status", flat=True):
            counts[status] += 1
        return counts


class TrialSerializer(StrictModelSerializer):
    run = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = Trial
        fields = [
            "number", "status", "reason", "params", "values", "intermediate", "last_step", "run", "created_at",
            "finished_at",
        ]  # fmt: skip
        read_only_fields = fields


class RegisterBestSerializer(StrictSerializer):
    name = serializers.CharField(max_length=250, help_text=_("The registered model (made if new)."))
    artifact_path = serializers.CharField(max_length=500, required=False, default="model")


class KatibImportSerializer(StrictSerializer):
    project = VisibleProjectField()
    experiment = serializers.JSONField(help_text=_("A Katib Experiment (v1beta1), as YAML text or a mapping."))
    name = serializers.CharField(
        max_length=80, required=False, allow_blank=True, help_text=_("The study's name (default: the Experiment's).")
    )


class RerunBestSerializer(StrictSerializer):
    args = serializers.JSONField(
        required=False, default=dict, help_text=_("Arguments to replace, by node: {node: {argument: value}}.")
    )
