"""FilterSets of the datasets app: one per list, shared by its page and its API list (docs/apps.md)."""

from __future__ import annotations

from apps.datasets.models import Dataset, DatasetVersion, UploadFile, UploadSession
from apps.projects.filters import ProjectScopedFilterSet


class DatasetFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Dataset
        fields = ["project", "name"]


class DatasetVersionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = DatasetVersion
        fields = ["project", "dataset", "number", "digest"]


class UploadSessionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = UploadSession
        fields = ["project", "dataset", "status"]


class UploadFileFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = UploadFile
        fields = ["project", "session"]
