from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.notebooks.models import Notebook
from apps.projects.api.serializers import AmountField, StrictModelSerializer, VisibleProjectField


class NotebookSerializer(StrictModelSerializer):
    """A notebook as the API shows it. Resources are checked by the service (the same messages as the pages);
    `memory` takes "4Gi", "512Mi" or bytes. Never the server's token or upstream: the proxy is the only door."""

    project = VisibleProjectField()
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    cpu = AmountField(required=False, help_text=_("CPU cores, e.g. 1 or 0.5."))
    memory = serializers.CharField(required=False, write_only=True, help_text=_("e.g. 512Mi, 4Gi, or bytes."))
    gpu = AmountField(required=False, help_text=_("Whole GPUs."))
    idle_timeout = serializers.IntegerField(
        required=False, allow_null=True, help_text=_("Minutes; null = the project's default.")
    )
    open_url = serializers.SerializerMethodField()
    effective_idle_timeout = serializers.SerializerMethodField()

    class Meta:
        model = Notebook
        fields = [
            "id", "project", "owner", "name", "ide", "image", "cpu", "memory", "memory_bytes", "gpu",
            "idle_timeout", "effective_idle_timeout", "status", "reason", "runtime", "started_at", "stopped_at",
            "last_activity", "idle_warned_at", "created_at", "open_url",
        ]  # fmt: skip
        read_only_fields = [
            "memory_bytes", "status", "reason", "runtime", "started_at", "stopped_at", "last_activity",
            "idle_warned_at", "created_at",
        ]  # fmt: skip
        validators: list[Any] = []  # uniqueness is the service's (one message for pages and API)
        extra_kwargs = {"name": {"validators": []}, "image": {"validators": []}, "ide": {"validators": []}}

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            for name in ("project", "name", "ide"):  # fixed once created
                fields[name].read_only = True
        return fields

    def to_representation(self, instance: Notebook) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["cpu"] = float(instance.cpu)
        data["gpu"] = float(instance.gpu)
        return data

    def get_open_url(self, notebook: Notebook) -> str | None:
        """Where the owner opens it (through the portal's proxy) while it runs."""
        return notebook.open_path if notebook.status == Notebook.Status.RUNNING else None

    def get_effective_idle_timeout(self, notebook: Notebook) -> int:
        from apps.notebooks.culler import effective_timeout

        return effective_timeout(notebook)
