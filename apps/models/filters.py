"""FilterSets of the models app (tracking and registry): one per list, shared by its page and its API list
(docs/apps.md). The experiment page's run search (MLflow's filter language) is `search.py`'s, not a FilterSet."""

from __future__ import annotations

from apps.models.models import Experiment, ModelAlias, ModelVersion, RegisteredModel, Run
from apps.projects.filters import ProjectScopedFilterSet, ProjectScopedListFilterSet
from portal.lib.listing import sort_by


class ExperimentFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name",)
    ordering = sort_by("name", "creation_time", "last_update_time")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = Experiment
        fields = ["project", "name", "search", "lifecycle_stage", "ordering"]


class TrackingRunFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Run
        fields = ["project", "experiment", "status", "lifecycle_stage"]


class RegisteredModelFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name", "description")
    ordering = sort_by("name", "creation_timestamp", "last_updated_timestamp")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = RegisteredModel
        fields = ["project", "name", "search", "ordering"]


class ModelVersionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = ModelVersion
        fields = ["project", "registered_model", "status", "stage"]


class ModelAliasFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = ModelAlias
        fields = ["project", "registered_model", "alias"]
