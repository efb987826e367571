from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import connection, models
from django.db.models import Model
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from apps.projects.models import Membership, Project, ProjectSecret, Quota, Role
from apps.projects.permissions import projects_for
from portal.lib import untrusted

# Sent by the browsable API's forms alongside the fields; never a field of ours.
FORM_KEYS = frozenset({"csrfmiddlewaretoken"})


class StrictFieldsMixin:
    """The write contract of every /api/v1 body, in one place (every serializer of `apps/*/api/` derives from
    `StrictSerializer` or `StrictModelSerializer`):

    - a key that is no field of the serializer is a 400 naming it: a misspelt option (`expires_in_days` for
      `days`) must not be dropped silently. Read-only fields are known and ignored, so a body read with GET may be
      sent back; nested serializers check their own keys.
    - a field that may not be null is never null after parsing: a multipart body's `"null"` parses to None in
      DRF's JSONField without meeting its `allow_null` check, and would reach a NOT NULL column (a 500).
    - no value holds a NUL or a lone surrogate, or nests past `untrusted.MAX_DEPTH` (`portal.lib.untrusted`: the
      JSON parser refuses them in JSON bodies; this catches multipart JSON and data given otherwise);
    - numbers fit their column: an IntegerField without bounds takes those of its model column (64 bits when it
      has none), and a FloatField refuses NaN and ±Infinity.
    """

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()  # type: ignore[misc]
        model = getattr(getattr(self, "Meta", None), "model", None)
        for name, field in fields.items():
            if not field.read_only:  # not bound yet: `source` is None unless it was given
                untrusted.bound_number_field(field, _column_range(model, field.source or name))
        return fields

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, Any] = {}
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            unknown = sorted(str(k) for k in data if k not in fields and k not in FORM_KEYS)
            if unknown:
                known = ", ".join(name for name, field in fields.items() if not field.read_only)
                message = _("Unknown field. Fields this endpoint takes: %(known)s.") % {"known": known or "none"}
                errors = {name: [message] for name in unknown}
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except RecursionError:  # a multipart field's JSON text, decoded by DRF's JSONField
            depth = {api_settings.NON_FIELD_ERRORS_KEY: [untrusted.depth_message()]}
            raise serializers.ValidationError(depth) from None
        except serializers.ValidationError as exc:
            if not errors:
                raise
            detail = exc.detail if isinstance(exc.detail, dict) else {api_settings.NON_FIELD_ERRORS_KEY: exc.detail}
            raise serializers.ValidationError({**detail, **errors}) from None
        errors.update(self._null_errors(value))
        if errors:
            raise serializers.ValidationError(errors)
        try:
            untrusted.check(value)
        except untrusted.UnsafeInput as exc:
            raise untrusted.validation_error(exc) from None
        return value

    def _null_errors(self, value: dict[str, Any]) -> dict[str, list[str]]:
        errors = {}
        for field in self._writable_fields:  # type: ignore[attr-defined]
            if field.allow_null or not field.source_attrs:
                continue
            node: Any = value
            for attr in field.source_attrs:
                node = node.get(attr, serializers.empty) if isinstance(node, dict) else serializers.empty
            if node is None:
                errors[field.field_name] = [str(field.error_messages["null"])]
        return errors


def _column_range(model: type[Model] | None, source: str) -> tuple[int | None, int | None] | None:
    """The range of integers the model's column `source` holds, or None when the field fills no integer column."""
    if model is None:
        return None
    try:
        model_field = model._meta.get_field(source)
    except FieldDoesNotExist:
        return None
    if not isinstance(model_field, models.IntegerField):
        return None
    return connection.ops.integer_field_range(model_field.get_internal_type())


class StrictSerializer(StrictFieldsMixin, serializers.Serializer):
    """A plain serializer of a request body under the strict write contract (see `StrictFieldsMixin`)."""


class StrictModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    """A model serializer under the strict write contract (see `StrictFieldsMixin`)."""


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string"}]})
class AmountField(serializers.CharField):
    """A resource amount: taken as text ("0.5", "2") for the service to parse, answered as a number."""


class RoleField(serializers.ChoiceField):
    """Roles as names on the wire ("owner", "admin", "editor", "viewer"), integers in the database."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[r.slug for r in Role], **kwargs)

    def to_representation(self, value: int) -> str:
        return Role(value).slug

    def to_internal_value(self, data: Any) -> int:
        return int(Role.from_name(super().to_internal_value(data)))


@extend_schema_field(OpenApiTypes.STR)
class VisibleProjectField(serializers.SlugRelatedField):
    """A project given by slug, looked up among the projects the requester (and token) can see."""

    default_error_messages = {"does_not_exist": _("No project “{value}” that you can access.")}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", **kwargs)

    def get_queryset(self):  # type: ignore[override]
        request = self.context["request"]
        qs = projects_for(request.user)
        token = request.auth if hasattr(request.auth, "project_id") else None
        if token is not None and token.project_id is not None:
            qs = qs.filter(pk=token.project_id)
        return qs


class QuotaSerializer(StrictModelSerializer):
    class Meta:
        model = Quota
        fields = ["cpu_cores", "memory_bytes", "gpus", "concurrent_runs", "concurrent_tasks", "storage_bytes"]
        read_only_fields = fields


class ProjectSerializer(StrictModelSerializer):
    quota = QuotaSerializer(read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    my_role = serializers.SerializerMethodField()

    class Meta:
        model = Project
        fields = [
            "slug", "name", "description", "runtime", "notebook_idle_timeout",
            "created_by", "created_at", "quota", "my_role",
        ]  # fmt: skip
        read_only_fields = ["created_by", "created_at"]
        # Uniqueness and format are the service's job (one set of messages for pages and API).
        extra_kwargs = {"slug": {"validators": []}, "notebook_idle_timeout": {"min_value": 1, "max_value": 7 * 24 * 60}}

    def get_my_role(self, project: Project) -> str | None:
        roles = self.context.get("my_roles")
        if roles is None:
            return None
        role = roles.get(project.pk)
        return Role(role).slug if role else None

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["slug"].read_only = True  # a slug is part of every URL: it never changes
        return fields


class MembershipSerializer(StrictModelSerializer):
    project = VisibleProjectField()
    user = serializers.CharField(
        help_text=_("Username or email of the person to add."), source="user.username", max_length=254
    )
    email = serializers.EmailField(source="user.email", read_only=True)
    role = RoleField()

    class Meta:
        model = Membership
        fields = ["id", "project", "user", "email", "role", "created_at"]
        read_only_fields = ["id", "created_at"]


class MembershipUpdateSerializer(StrictModelSerializer):
    role = RoleField()

    class Meta:
        model = Membership
        fields = ["role"]


class TransferSerializer(StrictSerializer):
    user = serializers.CharField(help_text=_("Username or email of the member who becomes owner."))


class ProjectSecretSerializer(StrictModelSerializer):
    """A secret as the API shows it: never its value, which is write-only (required when creating, optional when
    changing: given, it replaces the stored value). The name is fixed once created (pipelines reference it)."""

    project = VisibleProjectField()
    value = serializers.CharField(
        write_only=True, trim_whitespace=False, style={"input_type": "password"}, help_text=_("Write-only.")
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ProjectSecret
        fields = ["id", "project", "name", "value", "description", "created_by", "created_at", "updated_at"]
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        # Format and uniqueness are the service's job (one set of messages for pages and API).
        extra_kwargs = {"name": {"validators": []}, "description": {"validators": []}}
        validators: list = []

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
            fields["name"].read_only = True
            fields["value"].required = False
        return fields
