"""`/api/v1/knowledge-bases/` and `/api/v1/knowledge-documents/`.

Reads (list, retrieve, documents, query) work for the owner project's members and for members of the projects the
base is shared with; every write needs the owning project's role (a shared reader gets 403, an outsider 404).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.knowledge import chat, services
from apps.knowledge.api.serializers import (
    ChatAnswerSerializer,
    ChatSerializer,
    DatasetImportSerializer,
    DocumentSerializer,
    KnowledgeBaseSerializer,
    PassageSerializer,
    QueryResultSerializer,
    QuerySerializer,
    ShareSerializer,
    UploadSerializer,
)
from apps.knowledge.filters import DocumentFilterSet, KnowledgeBaseFilterSet
from apps.knowledge.llm import LLMError
from apps.knowledge.models import Document, KnowledgeBase
from apps.knowledge.streaming import sse_response
from apps.projects.api.base import ProjectPermission, ProjectScopedGenericViewSet, ProjectScopedViewSet
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW, has_project_perm

READ_ACTIONS = frozenset({"list", "retrieve", "documents", "query"})


class KnowledgePermission(ProjectPermission):
    """Reads: the object is in the user's readable queryset already (own or shared). Writes: the owner's role."""

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        if view.required_perm() == VIEW:
            return True
        if not has_project_perm(request.user, obj.project, VIEW):
            self.message = _("This knowledge base is shared with your project read-only.")
            return False
        return super().has_object_permission(request, view, obj)


def run_query(kb: KnowledgeBase, data: dict[str, Any]) -> services.QueryResult:
    return services.query(
        kb,
        data["query"],
        k=data.get("k", 5),
        documents=data.get("documents"),
        tags=data.get("tags"),
        mode=data.get("mode", "hybrid"),
    )


class KnowledgeBaseViewSet(ProjectScopedViewSet):
    """Knowledge bases of your projects and those shared with them. `POST …/query/` retrieves passages (hybrid
    BM25 + dense, fused by reciprocal rank), with `not_found` when nothing relevant is there."""

    queryset = KnowledgeBase.objects.select_related("project").prefetch_related("shares__project")
    serializer_class = KnowledgeBaseSerializer
    filterset_class = KnowledgeBaseFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    permission_classes = [*ProjectScopedViewSet.permission_classes[:-1], KnowledgePermission]
    action_perms = {
        "documents": VIEW,
        "query": VIEW,
        "chat": VIEW,
        "upload": CONTRIBUTE,
        "import_dataset": CONTRIBUTE,
        "share": CHANGE,
        "unshare": CHANGE,
    }

    def perform_create(self, serializer: KnowledgeBaseSerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        serializer.instance = services.create_knowledge_base(
            project, self.request.user, name=data.pop("name", ""), **data
        )

    def perform_update(self, serializer: KnowledgeBaseSerializer) -> None:
        serializer.instance = services.update_knowledge_base(serializer.instance, **serializer.validated_data)

    def perform_destroy(self, instance: KnowledgeBase) -> None:
        services.delete_knowledge_base(instance)

    @extend_schema(request=None, responses={200: DocumentSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def documents(self, request: Request, pk: str | None = None) -> Response:
        """The base's documents with their ingestion status (paginated)."""
        kb = self.get_object()
        qs = DocumentFilterSet(request.GET, queryset=kb.documents.all()).qs.defer("content")
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(DocumentSerializer(page, many=True).data)

    @extend_schema(request=UploadSerializer, responses={201: DocumentSerializer, 200: DocumentSerializer})
    @action(detail=True, methods=["post"])
    def upload(self, request: Request, pk: str | None = None) -> Response:
        """Add a file (multipart `file`, optional `name`, `tags`); the same content again is 200 and no new
        version, changed content is the next version and replaces the document's chunks once ingested."""
        kb = self.get_object()
        body = UploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        upload = body.validated_data["file"]
        data = upload.read()
        doc, changed = services.add_document(
            kb, request.user, body.validated_data.get("name") or upload.name, data, body.validated_data.get("tags", [])
        )
        return Response(DocumentSerializer(doc).data, status=status.HTTP_201_CREATED if changed else status.HTTP_200_OK)

    @extend_schema(request=DatasetImportSerializer, responses={201: DocumentSerializer(many=True)})
    @action(detail=True, methods=["post"], url_path="import-dataset")
    def import_dataset(self, request: Request, pk: str | None = None) -> Response:
        """Add every readable file of a dataset version of the base's project as documents."""
        from apps.datasets.models import DatasetVersion

        kb = self.get_object()
        body = DatasetImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        name, _sep, number = body.validated_data["dataset"].partition("@")
        version = (
            DatasetVersion.objects.filter(dataset__project=kb.project, dataset__name=name, number=number)
            .select_related("dataset")
            .first()
            if number.isdigit()
            else None
        )
        if version is None:
            raise ValidationError({"dataset": [_("No such dataset version in the knowledge base's project.")]})
        docs = services.add_dataset_version(kb, request.user, version, body.validated_data.get("tags", []))
        return Response(DocumentSerializer(docs, many=True).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuerySerializer, responses={200: QueryResultSerializer})
    @action(detail=True, methods=["post"])
    def query(self, request: Request, pk: str | None = None) -> Response:
        """Retrieval only: the best passages for `query`, with their lexical, dense and fused scores."""
        kb = self.get_object()
        body = QuerySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(QueryResultSerializer(run_query(kb, body.validated_data)).data)

    @extend_schema(request=ChatSerializer, responses={200: ChatAnswerSerializer})
    @action(detail=True, methods=["post"])
    def chat(self, request: Request, pk: str | None = None) -> Any:
        """An answer from the base's LLM, ending with the passages it rests on as [1], [2] (checked by the portal, also
        in `cited`; "Not found in the knowledge base." when nothing relevant is retrieved, without asking the LLM).
        `"stream": true` answers server-sent events: `passages`, then `token`s, then `done` with `cited` (or
        `error`)."""
        kb = self.get_object()
        body = ChatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        answer = chat.answer(kb, body.validated_data["question"])
        citations = PassageSerializer(answer.result.passages, many=True).data
        if body.validated_data.get("stream"):
            return sse_response(answer, citations)
        try:
            text = "".join(answer.tokens)
        except LLMError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_502_BAD_GATEWAY)
        return Response(
            {"answer": text, "not_found": answer.result.not_found, "passages": citations, "cited": answer.cited}
        )

    @extend_schema(request=ShareSerializer, responses={200: KnowledgeBaseSerializer})
    @action(detail=True, methods=["post"])
    def share(self, request: Request, pk: str | None = None) -> Response:
        """Let another project's members read the base (never change it)."""
        kb = self.get_object()
        body = ShareSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.share_knowledge_base(kb, body.validated_data["project"], request.user)
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=ShareSerializer, responses={200: KnowledgeBaseSerializer})
    @action(detail=True, methods=["post"])
    def unshare(self, request: Request, pk: str | None = None) -> Response:
        kb = self.get_object()
        body = ShareSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.unshare_knowledge_base(kb, body.validated_data["project"])
        return Response(self.get_serializer(self.get_object()).data)


class DocumentViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ProjectScopedGenericViewSet
):
    """Documents of the knowledge bases you can read; deleting one removes its chunks."""

    queryset = Document.objects.select_related("knowledge_base__project").defer("content")
    serializer_class = DocumentSerializer
    filterset_class = DocumentFilterSet
    search_fields = ["name"]
    ordering_fields = ["name", "updated_at", "status"]
    permission_classes = [*ProjectScopedGenericViewSet.permission_classes[:-1], KnowledgePermission]
    action_perms = {"reingest": CONTRIBUTE}

    def perform_destroy(self, instance: Document) -> None:
        services.delete_document(instance)

    @extend_schema(request=None, responses={200: DocumentSerializer})
    @action(detail=True, methods=["post"])
    def reingest(self, request: Request, pk: str | None = None) -> Response:
        """Queue the document's ingestion again (e.g. after a failure)."""
        return Response(DocumentSerializer(services.reingest_document(self.get_object())).data)
