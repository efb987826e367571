"""The Label Studio server the portal drives, and the labeling projects it holds for the portal's projects."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.querysets import TenantQuerySet
from portal.lib.fields import EncryptedText


class LabelStudioServer(models.Model):
    """The Label Studio server `make run` starts and provisions (`manage.py runlabelstudio`): its address and the
    admin account the portal acts as. One row, `key="local"`; the password and the access token are encrypted at
    rest like every other secret of the portal (portal.lib.fields.EncryptedText). A server named by
    LABEL_STUDIO_URL has no row: its token comes from the environment.
    """

    LOCAL = "local"

    key = models.CharField(max_length=20, unique=True, default=LOCAL)
    url = models.CharField(_("URL"), max_length=200)
    email = models.CharField(_("admin e-mail"), max_length=200)
    password = EncryptedText(null=True, blank=True)
    token = EncryptedText(null=True, blank=True)  # the admin's API token (Authorization: Token …)
    created_at = models.DateTimeField(default=timezone.now)
    # When the server last came up and accepted the token: provisioning is done once this is set.
    provisioned_at = models.DateTimeField(_("provisioned at"), null=True, blank=True)
    version = models.CharField(_("version"), max_length=50, blank=True)

    class Meta:
        verbose_name = _("Label Studio server")

    def __str__(self) -> str:
        return f"{self.key} ({self.url})"


class LabelingProject(models.Model):
    """A set of tasks to annotate, made from one dataset version, held by a project of Label Studio.

    The label configuration is Label Studio's XML, built from the form's kind and labels (or written by hand for
    `kind=xml`) and validated by Label Studio before anything is saved.
    """

    class Kind(models.TextChoices):
        IMAGE_CLASSIFICATION = "image_classification", _("Image classification")
        OBJECT_DETECTION = "object_detection", _("Object detection (rectangles)")
        TEXT_CLASSIFICATION = "text_classification", _("Text classification")
        NER = "ner", _("Named entities")
        XML = "xml", _("Label Studio XML")

    class Status(models.TextChoices):
        CREATING = "creating", _("Creating")
        IMPORTING = "importing", _("Importing tasks")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="labeling_projects")
    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    dataset_version = models.ForeignKey(
        "datasets.DatasetVersion", on_delete=models.PROTECT, related_name="labeling_projects"
    )
    kind = models.CharField(_("kind"), max_length=30, choices=Kind.choices)
    labels = models.JSONField(_("labels"), default=list, blank=True)
    # Text sources: the column of a CSV/JSONL file holding the text ("" for plain text lines).
    text_column = models.CharField(_("text column"), max_length=200, blank=True)
    label_config = models.TextField(_("label configuration"))
    ls_project_id = models.PositiveIntegerField(_("Label Studio project"), null=True, blank=True, unique=True)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.CREATING)
    reason = models.TextField(_("reason"), blank=True)
    task_count = models.PositiveIntegerField(_("tasks"), default=0)
    # What the last sync read from Label Studio (sync.py): labeled/skipped/total, per annotator, agreement.
    progress = models.JSONField(_("progress"), default=dict, blank=True)
    synced_at = models.DateTimeField(_("synced at"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # "Train on these labels" and Label Studio's START_TRAINING start this pipeline of the project on a fresh export
    # (training.py); START_TRAINING acts as the member who chose it (`training_by`), with their rights at the time.
    training_pipeline = models.ForeignKey(
        "jobs.Pipeline", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("training pipeline"),
    )  # fmt: skip
    training_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="labeling_project_name_unique")]

    def __str__(self) -> str:
        return self.name


class LabelingTask(models.Model):
    """One task imported into Label Studio: which file (and row, for tabular text) of the dataset version it shows.

    Kept so that media URLs are answered only for files that belong to a labeling project's version, and so that
    annotations synced back can be matched to files.
    """

    class State(models.TextChoices):
        TODO = "todo", _("To do")
        LABELED = "labeled", _("Labeled")
        SKIPPED = "skipped", _("Skipped")

    labeling_project = models.ForeignKey(LabelingProject, on_delete=models.CASCADE, related_name="tasks")
    ls_task_id = models.PositiveIntegerField(null=True, blank=True, db_index=True)
    path = models.CharField(max_length=1000)
    row = models.PositiveIntegerField(null=True, blank=True)  # the line of a text/CSV/JSONL file; null: whole file
    # The attached model's last prediction for this task: its score orders "uncertain first" (lowest first).
    score = models.FloatField(_("prediction score"), null=True, blank=True)
    model_version = models.CharField(_("model version"), max_length=200, blank=True)
    # Where the task stands in Label Studio (sync.py keeps it; the annotate page writes it at once): the page's
    # next task is the first one still to do, in "uncertain first" order.
    state = models.CharField(_("state"), max_length=10, choices=State.choices, default=State.TODO)

    objects = TenantQuerySet.as_manager()
    tenant_path = "labeling_project__project"

    class Meta:
        ordering = ["labeling_project", "pk"]

    def __str__(self) -> str:
        return f"{self.path}#{self.row}" if self.row is not None else self.path

    @property
    def project(self):
        return self.labeling_project.project


class Annotation(models.Model):
    """An annotation made in the portal's annotate page: which portal user made it (Label Studio records the
    portal's service account as `completed_by`; this row is who really annotated, for per-annotator progress).

    The result itself lives in Label Studio only; `ls_annotation_id` is its id there.
    """

    task = models.ForeignKey(LabelingTask, on_delete=models.CASCADE, related_name="annotations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    # Kept when the account is deleted: progress still names who annotated.
    username = models.CharField(_("annotator"), max_length=150)
    ls_annotation_id = models.PositiveIntegerField(_("Label Studio annotation"), unique=True)
    was_cancelled = models.BooleanField(_("skipped"), default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "task__labeling_project__project"

    class Meta:
        ordering = ["task", "pk"]
        constraints = [models.UniqueConstraint(fields=["task", "user"], name="labeling_annotation_one_per_user")]

    def __str__(self) -> str:
        return f"{self.username} → {self.task}"

    @property
    def project(self):
        return self.task.labeling_project.project


class LabelingExport(models.Model):
    """Lineage: the dataset version a labeling project's annotations were exported to (never changed after)."""

    labeling_project = models.ForeignKey(LabelingProject, on_delete=models.CASCADE, related_name="exports")
    version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.PROTECT, related_name="labeling_exports")
    formats = models.JSONField(_("formats"), default=list)
    annotated_tasks = models.PositiveIntegerField(_("annotated tasks"), default=0)
    # The training run started on this version ("train on these labels", START_TRAINING): lineage onwards.
    run = models.ForeignKey("jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "labeling_project__project"

    class Meta:
        ordering = ["labeling_project", "-created_at"]

    def __str__(self) -> str:
        return f"{self.labeling_project} → {self.version_id}"

    @property
    def project(self):
        return self.labeling_project.project


class MLBackend(models.Model):
    """An inference service of the project attached to a labeling project as Label Studio's ML backend.

    The portal answers the ML-backend protocol for it (`mlbackend.py`); Label Studio calls with HTTP basic auth:
    `username` and a random password, sent to Label Studio once at registration and kept here only as a
    Django password hash (a leaked row cannot be replayed).
    """

    labeling_project = models.OneToOneField(LabelingProject, on_delete=models.CASCADE, related_name="ml_backend")
    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+")
    username = models.CharField(max_length=100)
    password_hash = models.CharField(max_length=200)
    ls_ml_backend_id = models.PositiveIntegerField(_("Label Studio ML backend"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "labeling_project__project"

    class Meta:
        verbose_name = _("ML backend")

    def __str__(self) -> str:
        return f"{self.labeling_project} ← {self.service}"

    @property
    def project(self):
        return self.labeling_project.project
