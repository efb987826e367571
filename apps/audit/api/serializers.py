from rest_framework import serializers

from apps.audit.models import AuditEntry
from apps.projects.api.serializers import StrictModelSerializer


class AuditEntrySerializer(StrictModelSerializer):
    actor = serializers.CharField(source="actor_repr", read_only=True)
    project = serializers.CharField(source="project_repr", read_only=True)
    token = serializers.CharField(source="token.prefix", read_only=True, default=None)

    class Meta:
        model = AuditEntry
        fields = [
            "id", "created_at", "actor", "token", "action", "object_type", "object_id", "object_repr", "project",
            "changes", "ip", "user_agent", "method", "path", "status",
        ]  # fmt: skip
        read_only_fields = fields
