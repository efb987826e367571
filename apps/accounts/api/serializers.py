from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.accounts.models import ApiToken, Notification
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class ApiTokenSerializer(StrictModelSerializer):
    project = VisibleProjectField(required=False, allow_null=True)
    days = serializers.IntegerField(
        write_only=True, required=False, allow_null=True, help_text=_("Expire after this many days (empty: never).")
    )
    # Writable when creating (it was read-only, so a given expiry was dropped and the token never expired).
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text=_("Expire at this time (or give days; neither: never).")
    )
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "project",
            "scope",
            "kind",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "is_active",
            "days",
        ]
        read_only_fields = ["id", "kind", "prefix", "created_at", "last_used_at", "revoked_at"]


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text=_("The token itself. Shown only in this response."))

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class NotificationSerializer(StrictModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "message", "url", "created_at", "read_at"]
        read_only_fields = fields


class MarkReadSerializer(StrictSerializer):
    # Bounded like the primary key (64-bit): a larger number is a 400, not a database overflow (500).
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        help_text=_("Omit to mark all."),
    )


class ProfileSerializer(StrictModelSerializer):
    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "first_name", "last_name", "language", "date_joined", "is_staff"]
        read_only_fields = ["id", "username", "date_joined", "is_staff"]

    def validate_email(self, value: str) -> str:
        User = get_user_model()
        if value and User.objects.filter(email__iexact=value).exclude(pk=self.instance.pk).exists():
            raise serializers.ValidationError(_("Another account uses this email."))
        return value
