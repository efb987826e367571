from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.appstore import services
from apps.appstore.models import App, AppVersion, Installation, InstalledObject
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class AppVersionSerializer(StrictModelSerializer):
    creates = serializers.SerializerMethodField()

    class Meta:
        model = AppVersion
        fields = ["id", "version", "digest", "manifest", "readme", "created_at", "creates"]
        read_only_fields = fields

    def get_creates(self, version: AppVersion) -> list[dict[str, str]]:
        return [{"kind": kind, "description": text} for kind, text in services.plan(version)]


class AppSerializer(StrictModelSerializer):
    """A catalogue entry with its newest version's metadata; `versions` on the detail."""

    project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)  # none: built-in
    latest = serializers.SerializerMethodField()

    class Meta:
        model = App
        fields = ["id", "name", "project", "visibility", "builtin", "created_at", "latest"]
        read_only_fields = fields

    def get_latest(self, app: App) -> dict[str, Any] | None:
        latest = app.latest
        return None if latest is None else {"version": latest.version, "digest": latest.digest, **latest.metadata}


class InstalledObjectSerializer(StrictModelSerializer):
    class Meta:
        model = InstalledObject
        fields = ["kind", "name", "object_id"]
        read_only_fields = fields


class InstallationSerializer(StrictModelSerializer):
    """An installation. Create: `project`, `app` (a name), optionally `version` (default the newest), `name` and
    `parameters`; the install is all or nothing, and its errors name the manifest field or parameter at fault."""

    project = VisibleProjectField()
    app = serializers.CharField(write_only=True)
    version = serializers.CharField(write_only=True, required=False)
    app_name = serializers.CharField(source="app_version.app.name", read_only=True)
    app_version_number = serializers.CharField(source="app_version.version", read_only=True)
    name = serializers.CharField(required=False, allow_blank=True)
    parameters = serializers.JSONField(required=False)
    created = InstalledObjectSerializer(many=True, read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Installation
        fields = ["id", "project", "app", "version", "app_name", "app_version_number", "name", "parameters",
                  "created", "created_by", "created_at", "updated_at"]  # fmt: skip
        read_only_fields = ["created_by", "created_at", "updated_at"]
        validators: list[Any] = []
        extra_kwargs = {"name": {"validators": []}}


class UninstallSerializer(StrictSerializer):
    delete_data = serializers.BooleanField(default=False, help_text=_("Also delete datasets and trained models."))


class PublishSerializer(StrictSerializer):
    project = VisibleProjectField()
    kind = serializers.ChoiceField(choices=["pipeline", "service", "notebook"])
    object = serializers.IntegerField(help_text=_("The id of the project's pipeline, service or notebook."))
    name = serializers.CharField(max_length=50, help_text=_("The app's name: lower-case letters, digits, hyphens."))
    version = serializers.CharField(max_length=50)
    title = serializers.CharField(max_length=200)
    summary = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)
    visibility = serializers.ChoiceField(choices=App.Visibility.choices, default=App.Visibility.PROJECT)
    share_with = serializers.ListField(
        child=serializers.SlugField(), required=False, default=list, help_text=_("Project slugs (when shared).")
    )
    files = serializers.ListField(
        child=serializers.CharField(max_length=500), required=False, default=list,
        help_text=_("A notebook's starter files, relative to its owner's folder."),
    )  # fmt: skip

    def validate_share_with(self, slugs: list[str]) -> list[Any]:
        from apps.projects.models import Project

        found = {p.slug: p for p in Project.objects.filter(slug__in=slugs)}
        unknown = [s for s in slugs if s not in found]
        if unknown:
            raise serializers.ValidationError(_("No project %(slugs)s.") % {"slugs": ", ".join(unknown)})
        return [found[s] for s in slugs]


class BundleUploadSerializer(StrictSerializer):
    project = VisibleProjectField()
    bundle = serializers.FileField(help_text=_("The bundle as a zip (app.yaml, README.md and its files)."))
    visibility = serializers.ChoiceField(choices=["project", "public"], default="project")
