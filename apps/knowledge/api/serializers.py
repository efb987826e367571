from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from apps.knowledge.models import Document, KnowledgeBase
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class ServiceNameField(serializers.CharField):
    """An inference service of the base's project, by name ("" for none)."""

    def to_representation(self, value: Any) -> str:
        return value.name if value is not None else ""


class KnowledgeBaseSerializer(StrictModelSerializer):
    """A knowledge base. `shared_with` lists the projects that may read it (its owner's project sees them)."""

    project = VisibleProjectField()
    shared_with = serializers.SerializerMethodField()
    document_count = serializers.SerializerMethodField()
    llm_service = ServiceNameField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=50,
        help_text=_("One of the project's `llm` inference services, by name: it answers the chat (before `llm_url`)."),
    )

    class Meta:
        model = KnowledgeBase
        fields = [
            "id", "project", "name", "description", "llm_service", "llm_url", "llm_model", "llm_key_secret",
            "shared_with", "document_count", "created_at",
        ]  # fmt: skip
        read_only_fields = ["created_at"]
        validators: list[Any] = []  # uniqueness is the service's
        extra_kwargs = {"name": {"validators": []}}

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields

    def get_shared_with(self, kb: KnowledgeBase) -> list[str]:
        return sorted(s.project.slug for s in kb.shares.all())

    def get_document_count(self, kb: KnowledgeBase) -> int:
        return kb.documents.count()


class DocumentSerializer(StrictModelSerializer):
    knowledge_base = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = Document
        fields = [
            "id", "knowledge_base", "name", "kind", "tags", "size", "digest", "version", "source", "status",
            "reason", "chunk_count", "created_at", "updated_at", "ingested_at",
        ]  # fmt: skip
        read_only_fields = fields


class UploadSerializer(StrictSerializer):
    file = serializers.FileField(help_text=_("Markdown, text, HTML, PDF (text layer) or CSV."))
    name = serializers.CharField(required=False, max_length=255, help_text=_("Defaults to the file's name."))
    tags = serializers.ListField(child=serializers.CharField(max_length=50), required=False, max_length=20)


class DatasetImportSerializer(StrictSerializer):
    dataset = serializers.CharField(help_text=_("<dataset>@<version> of the base's project, e.g. docs@3."))
    tags = serializers.ListField(child=serializers.CharField(max_length=50), required=False, max_length=20)


class ShareSerializer(StrictSerializer):
    project = serializers.CharField(max_length=50, help_text=_("The slug of the project to share with."))


class QuerySerializer(StrictSerializer):
    query = serializers.CharField(max_length=2000)
    k = serializers.IntegerField(required=False, min_value=1, max_value=50, default=5)
    mode = serializers.ChoiceField(choices=["hybrid", "lexical", "dense"], required=False, default="hybrid")
    documents = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False, max_length=500)
    tags = serializers.ListField(child=serializers.CharField(max_length=50), required=False, max_length=20)


class PassageSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    chunk = serializers.IntegerField(source="chunk.pk")
    document = serializers.IntegerField(source="chunk.document_id")
    document_name = serializers.CharField(source="chunk.document.name")
    text = serializers.CharField(source="chunk.text")
    start = serializers.IntegerField(source="chunk.start")
    end = serializers.IntegerField(source="chunk.end")
    page = serializers.IntegerField(source="chunk.page", allow_null=True)
    heading_path = serializers.ListField(source="chunk.heading_path", child=serializers.CharField())
    score = serializers.FloatField(source="hit.fused")
    lexical_score = serializers.FloatField(source="hit.lexical", allow_null=True)
    lexical_rank = serializers.IntegerField(source="hit.lexical_rank", allow_null=True)
    dense_score = serializers.FloatField(source="hit.dense", allow_null=True)
    dense_rank = serializers.IntegerField(source="hit.dense_rank", allow_null=True)


class QueryResultSerializer(serializers.Serializer):
    query = serializers.CharField()
    not_found = serializers.BooleanField()
    best_dense = serializers.FloatField()
    best_lexical = serializers.FloatField()
    passages = PassageSerializer(many=True)


class ChatSerializer(StrictSerializer):
    question = serializers.CharField(max_length=2000)
    stream = serializers.BooleanField(required=False, default=False)


class ChatAnswerSerializer(serializers.Serializer):
    answer = serializers.CharField()
    not_found = serializers.BooleanField()
    passages = PassageSerializer(many=True)
    cited = serializers.ListField(
        child=serializers.IntegerField(), help_text=_("Numbers of the passages the answer rests on (checked).")
    )
