"""FilterSets of continuous training's lists (`?project=<slug>`; decisions also `?outcome=pending&policy=<id>`)."""

from __future__ import annotations

from apps.projects.filters import ProjectScopedFilterSet
from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy


class RetrainPolicyFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = RetrainPolicy
        fields = ["project", "enabled", "pipeline", "registered_model"]


class DataMonitorFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = DataMonitor
        fields = ["project", "enabled", "dataset", "policy"]


class DataCheckFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = DataCheck
        fields = ["project", "monitor", "triggered"]


class RetrainingFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Retraining
        fields = ["project", "policy", "status", "reason"]


class PromotionDecisionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = PromotionDecision
        fields = ["project", "policy", "outcome"]
