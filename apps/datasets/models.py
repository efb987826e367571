"""Datasets, their immutable versions, content-addressed blobs, resumable upload sessions and lineage."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.querysets import TenantQuerySet

name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
    _("Use up to 100 letters, digits, dots, hyphens and underscores, starting with a letter or digit."),
    code="invalid_name",
)


class Dataset(models.Model):
    """A named collection of versions inside a project (e.g. "iris")."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(_("name"), max_length=100, validators=[name_validator])
    description = models.TextField(_("description"), blank=True)
    tags = models.JSONField(_("tags"), default=list, blank=True)
    licence = models.CharField(_("licence"), max_length=100, blank=True)
    source = models.CharField(_("source"), max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name", "pk"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="datasets_dataset_name_unique")]

    def __str__(self) -> str:
        return self.name


class Blob(models.Model):
    """One stored file, named by the SHA-256 of its content: identical files are stored once.

    Blobs are shared across versions (and projects); a blob that no version and no open upload uses is
    purged by `services.purge_unused_blobs`.
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.sha256

    @property
    def storage_name(self) -> str:
        return blob_storage_name(self.sha256)


def blob_storage_name(sha256: str) -> str:
    return f"blobs/{sha256[:2]}/{sha256[2:4]}/{sha256}"


class AnalysisStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")


class DatasetVersion(models.Model):
    """An immutable snapshot of a dataset: its files (the manifest) never change once committed.

    Only the computed fields (`schema`, `statistics`, `previews`, `analysis_*`) are written later, by the
    analysis task. `digest` is the SHA-256 of the canonical manifest, so equal content has equal digests.
    """

    IMMUTABLE_FIELDS = ("dataset_id", "number", "digest", "total_size", "file_count", "parent_id")

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    message = models.TextField(_("message"), blank=True)
    parent = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children")
    digest = models.CharField(max_length=64, db_index=True)
    total_size = models.BigIntegerField(default=0)
    file_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Lineage of the writer, when a pipeline task published this version.
    task_run = models.ForeignKey("jobs.TaskRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    pipeline_run = models.ForeignKey(
        "jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Computed after commit by tasks.analyze_version.
    schema = models.JSONField(default=dict, blank=True)
    statistics = models.JSONField(default=dict, blank=True)
    previews = models.JSONField(default=dict, blank=True)
    analysis_status = models.CharField(max_length=10, choices=AnalysisStatus.choices, default=AnalysisStatus.PENDING)
    analysis_error = models.TextField(blank=True)

    objects = TenantQuerySet.as_manager()
    tenant_path = "dataset__project"

    class Meta:
        ordering = ["dataset_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="datasets_version_number_unique")]

    def __str__(self) -> str:
        return f"{self.dataset.name}@{self.number}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            update_fields = kwargs.get("update_fields")
            if update_fields is None or set(update_fields) & {f.removesuffix("_id") for f in self.IMMUTABLE_FIELDS}:
                raise ValidationError(_("A committed dataset version is immutable."))
        super().save(*args, **kwargs)

    @property
    def project(self):
        return self.dataset.project

    @property
    def ref(self) -> str:
        return f"{self.dataset.name}@{self.number}"

    @property
    def row_count(self) -> int | None:
        counts = [s.get("row_count") for s in (self.statistics or {}).values() if isinstance(s, dict)]
        counts = [c for c in counts if isinstance(c, int)]
        return sum(counts) if counts else None


class VersionFile(models.Model):
    """One entry of a version's manifest: a relative path, its size and the blob holding its content."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1000)
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="+")
    size = models.BigIntegerField()

    objects = TenantQuerySet.as_manager()
    tenant_path = "version__dataset__project"

    class Meta:
        ordering = ["version_id", "path"]
        constraints = [models.UniqueConstraint(fields=["version", "path"], name="datasets_versionfile_path_unique")]

    def __str__(self) -> str:
        return self.path

    @property
    def sha256(self) -> str:
        return self.blob_id


class UploadStatus(models.TextChoices):
    OPEN = "open", _("Open")
    COMMITTED = "committed", _("Committed")
    ABORTED = "aborted", _("Aborted")


class UploadSession(models.Model):
    """A resumable upload that becomes one new version when committed (and nothing visible before).

    `base` names the version whose files the new one starts from (None: an empty version).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="uploads")
    base = models.ForeignKey(DatasetVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    message = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=UploadStatus.choices, default=UploadStatus.OPEN)
    version = models.ForeignKey(DatasetVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    task_run = models.ForeignKey("jobs.TaskRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"upload {self.id} of {self.dataset}"


class UploadFile(models.Model):
    """One file (or archive to expand) of an upload session; `offset` bytes have arrived so far."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(UploadSession, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1000, help_text=_("Path inside the version (the prefix for an archive)."))
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64, blank=True, help_text=_("Expected SHA-256 (hex), verified at the end."))
    archive = models.BooleanField(default=False, help_text=_("A zip or tar file to expand into the version."))
    offset = models.BigIntegerField(default=0)
    blob = models.ForeignKey(Blob, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "session__project"

    class Meta:
        ordering = ["created_at", "path"]
        constraints = [models.UniqueConstraint(fields=["session", "path"], name="datasets_uploadfile_path_unique")]

    def __str__(self) -> str:
        return self.path

    @property
    def project(self):
        return self.session.project

    @property
    def complete(self) -> bool:
        return self.offset >= self.size and (self.blob_id is not None or self.archive)


class Direction(models.TextChoices):
    READ = "read", _("Read")
    WRITE = "write", _("Write")


class DatasetUsage(models.Model):
    """Lineage: a pipeline run (or one task of it) read or wrote a dataset version."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="usages")
    task_run = models.ForeignKey("jobs.TaskRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    pipeline_run = models.ForeignKey(
        "jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    direction = models.CharField(max_length=5, choices=Direction.choices)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "version__dataset__project"

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.direction} {self.version}"
