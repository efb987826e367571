"""Admin of knowledge bases: settings editable, shares and documents read-only inlines (documents are written by
the ingestion service); chunks are shown read-only per document. Deletes go through the services."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.knowledge import services
from apps.knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseShare
from apps.projects.admin import ReadOnlyAdminMixin, ReadOnlyTabularInline, TenantAdminMixin


class ShareInline(ReadOnlyTabularInline):
    model = KnowledgeBaseShare
    fk_name = "knowledge_base"


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "project", "llm_model", "created_at"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]
    fields = [
        "project", "name", "description", "llm_service", "llm_url", "llm_model", "llm_key_secret", "created_by",
        "created_at",
    ]  # fmt: skip
    # The service is the project's own (checked by the service layer): not chosen here among every project's.
    readonly_fields = ["project", "llm_service", "created_by", "created_at"]
    inlines = [ShareInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created in a project's pages or the API (the name rules live in the service)

    def delete_model(self, request: HttpRequest, obj: KnowledgeBase) -> None:
        services.delete_knowledge_base(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KnowledgeBase]) -> None:
        for kb in queryset:
            services.delete_knowledge_base(kb)


@admin.register(Document)
class DocumentAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "knowledge_base", "kind", "version", "status", "chunk_count", "updated_at"]
    list_filter = ["status", "kind"]
    search_fields = ["name", "knowledge_base__name"]
    list_select_related = ["knowledge_base__project"]
    exclude = ["content"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).defer("content")


@admin.register(Chunk)
class ChunkAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "page", "heading", "start", "end"]
    search_fields = ["text", "document__name"]
    list_select_related = ["document"]
    exclude = ["embedding"]


@admin.register(KnowledgeBaseShare)
class KnowledgeBaseShareAdmin(TenantAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["knowledge_base", "project", "granted_by", "created_at"]
    list_select_related = ["knowledge_base__project", "project"]
