"""Knowledge bases, the projects they are shared with, their documents and the chunks retrieval searches."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.permissions import VIEW, projects_for
from apps.projects.querysets import TenantQuerySet


class KnowledgeBaseQuerySet(TenantQuerySet):
    """A knowledge base is visible in its own project and, read-only, in the projects its owner shared it with."""

    def in_project(self, project: Any) -> KnowledgeBaseQuerySet:
        """Bases available in `project`: its own and those shared with it (writes check `is_owned_by`)."""
        return self.filter(Q(project=project) | Q(shares__project=project)).distinct()

    def for_user(self, user: Any, perm: str = VIEW, token: Any = None) -> KnowledgeBaseQuerySet:
        own = TenantQuerySet.for_user(self, user, perm, token)
        if perm != VIEW:
            return own
        visible = projects_for(user, VIEW)
        if token is not None and token.project_id is not None:
            visible = visible.filter(pk=token.project_id)
        shared = self.filter(shares__project__in=visible.values("pk"))
        return self.filter(Q(pk__in=own.values("pk")) | Q(pk__in=shared.values("pk")))


class ChildQuerySet(TenantQuerySet):
    """Documents and chunks follow their knowledge base: readable wherever the base is."""

    def in_project(self, project: Any) -> ChildQuerySet:
        return self.filter(knowledge_base__in=KnowledgeBase.objects.in_project(project).values("pk"))

    def for_user(self, user: Any, perm: str = VIEW, token: Any = None) -> ChildQuerySet:
        bases = KnowledgeBase.objects.for_user(user, perm, token)
        return self.filter(knowledge_base__in=bases.values("pk"))


class KnowledgeBase(models.Model):
    """A project's collection of documents, answered from by retrieval (and an LLM where one is configured)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="knowledge_bases")
    name = models.CharField(_("name"), max_length=50, validators=[slug_validator])
    description = models.TextField(_("description"), blank=True)
    # Where answers come from: an OpenAI-compatible base URL ("…/v1"), the model name, and the name of the project
    # secret holding its API key ("" when the endpoint needs none). Empty URL: retrieval only.
    llm_url = models.URLField(_("LLM endpoint (OpenAI-compatible base URL)"), blank=True)
    llm_model = models.CharField(_("LLM model"), max_length=200, blank=True)
    llm_key_secret = models.CharField(_("project secret holding the API key"), max_length=100, blank=True)
    # Or the project's own `llm` inference service (its ready replicas answer; no URL or key to keep): what the demo
    # and the app store's "document Q&A" wire. It takes precedence over the URL.
    llm_service = models.ForeignKey(
        "serving.InferenceService",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="knowledge_bases",
        verbose_name=_("LLM inference service"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = KnowledgeBaseQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="knowledge_base_unique_name")]

    def __str__(self) -> str:
        return self.name

    def is_owned_by(self, project: Any) -> bool:
        return self.project_id == project.pk


class KnowledgeBaseShare(models.Model):
    """The owner's grant: members of `project` may read (browse, query, chat) the base, never change it."""

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="shares")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="+")
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    tenant_path = "knowledge_base__project"

    class Meta:
        ordering = ["knowledge_base", "project"]
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "project"], name="knowledge_share_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.knowledge_base} → {self.project}"


class Document(models.Model):
    """One file of a knowledge base, versioned by the SHA-256 of its content.

    The bytes are kept on the row (uploads are capped, `PORTAL_KNOWLEDGE_MAX_BYTES`) so that a worker on any host
    ingests exactly what was uploaded; a new upload under the same name with other content is the next version and
    replaces its chunks.
    """

    class Kind(models.TextChoices):
        MARKDOWN = "markdown", _("Markdown")
        TEXT = "text", _("Plain text")
        HTML = "html", _("HTML")
        PDF = "pdf", _("PDF")
        CSV = "csv", _("CSV")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        INGESTING = "ingesting", _("Ingesting")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    name = models.CharField(_("name"), max_length=255)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    tags = models.JSONField(_("tags"), default=list, blank=True)
    content = models.BinaryField()
    size = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=64)
    version = models.PositiveIntegerField(default=1)
    # Where it came from: "" for an upload, "<dataset>@<version>" for a dataset version's file.
    source = models.CharField(_("source"), max_length=255, blank=True)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(_("reason"), blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    ingested_at = models.DateTimeField(null=True, blank=True)

    objects = ChildQuerySet.as_manager()
    tenant_path = "knowledge_base__project"

    class Meta:
        ordering = ["knowledge_base", "name"]
        constraints = [models.UniqueConstraint(fields=["knowledge_base", "name"], name="knowledge_document_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def project(self) -> Any:
        return self.knowledge_base.project


class Chunk(models.Model):
    """A passage of a document: its text, where it sits (character offsets into the extracted text, page, heading
    path) for citations, and its embedding (float32 bytes, L2-normalised) stored with the row."""

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="chunks")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    page = models.PositiveIntegerField(null=True, blank=True)
    heading_path = models.JSONField(default=list, blank=True)
    embedding = models.BinaryField()

    objects = ChildQuerySet.as_manager()
    tenant_path = "knowledge_base__project"

    class Meta:
        ordering = ["document", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["document", "ordinal"], name="knowledge_chunk_unique")]

    def __str__(self) -> str:
        return f"{self.document} #{self.ordinal}"

    @property
    def project(self) -> Any:
        return self.knowledge_base.project

    def vector(self) -> np.ndarray:
        return np.frombuffer(bytes(self.embedding), dtype=np.float32)

    @property
    def heading(self) -> str:
        return " › ".join(self.heading_path)
