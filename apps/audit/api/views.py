"""`/api/v1/audit/`: read-only; staff read every entry, project admins their projects' (others: empty, 404)."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import permissions, viewsets

from apps.audit.api.serializers import AuditEntrySerializer
from apps.audit.filters import AuditEntryFilterSet
from apps.audit.models import AuditEntry
from apps.projects.api.base import TokenScopePermission, request_token


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log (append-only: no write methods exist)."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    permission_classes = [permissions.IsAuthenticated, TokenScopePermission]
    filterset_class = AuditEntryFilterSet
    ordering_fields = ["created_at"]
    search_fields = ["object_repr", "actor_repr", "path"]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        entries = AuditEntry.objects.for_user(self.request.user, token=request_token(self.request))
        return entries.select_related("token")
