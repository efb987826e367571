"""FilterSets of the models app (tracking and registry): one per list, shared by its page and its API list
(docs/apps.md). The experiment page's run search (MLflow's filter language) is `search.py`'s, not a FilterSet."""

from __future__ import annotations

from apps.models.models import Experiment, ModelAlias, ModelVersion, RegisteredModel, Run
from apps.projects.filters import ProjectScopedFilterSet


class ExperimentFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Experiment
        fields = ["project", "name", "lifecycle_stage"]


class TrackingRunFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Run
        fields = ["project", "experiment", "status", "lifecycle_stage"]


class RegisteredModelFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = RegisteredModel
        fields = ["project", "name"]


class ModelVersionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = ModelVersion
        fields = ["project", "registered_model", "status", "stage"]


class ModelAliasFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = ModelAlias
        fields = ["project", "registered_model", "alias"]
