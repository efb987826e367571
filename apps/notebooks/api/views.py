from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.notebooks import services
from apps.notebooks.api.serializers import NotebookSerializer
from apps.notebooks.filters import NotebookFilterSet
from apps.notebooks.models import Notebook
from apps.projects.api.base import ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE
from apps.projects.services import UNCHANGED

OWNER_ONLY = _("Only the notebook's owner may do this.")
OWNER_OR_ADMIN = _("Only the notebook's owner or a project admin may do this.")


class NotebookViewSet(ProjectScopedViewSet):
    """Notebook servers (JupyterLab) of the projects you belong to. Every member lists them; only the owner
    starts, restarts and changes one; the owner or a project admin stops or deletes it. Files are kept."""

    queryset = Notebook.objects.select_related("project", "project__quota", "owner")
    serializer_class = NotebookSerializer
    filterset_class = NotebookFilterSet
    ordering_fields = ["name", "created_at", "last_activity", "status"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    action_perms = {"start": CONTRIBUTE, "stop": CONTRIBUTE, "restart": CONTRIBUTE}

    def check_object_permissions(self, request: Request, obj: Notebook) -> None:
        super().check_object_permissions(request, obj)  # the project role first (403 without it)
        if self.action in ("stop", "destroy"):
            if not services.can_stop(request.user, obj):
                self.permission_denied(request, message=OWNER_OR_ADMIN)
        elif self.action not in ("retrieve", None) and not services.can_operate(request.user, obj):
            self.permission_denied(request, message=OWNER_ONLY)

    def perform_create(self, serializer: NotebookSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        keys = ("ide", "image", "cpu", "memory", "gpu", "idle_timeout")
        serializer.instance = services.create_notebook(
            data["project"], self.request.user, name=data.get("name", ""), **{k: data[k] for k in keys if k in data}
        )

    def perform_update(self, serializer: NotebookSerializer) -> None:
        data = serializer.validated_data
        keys = ("image", "cpu", "memory", "gpu", "idle_timeout")
        serializer.instance = services.update_notebook(serializer.instance, **{k: data.get(k, UNCHANGED) for k in keys})

    def perform_destroy(self, instance: Notebook) -> None:
        services.delete_notebook(instance)

    def _act(self, service: Any) -> Response:
        notebook = service(self.get_object())  # ValidationError (cannot start now) answers 400
        return Response(self.get_serializer(notebook).data, status=status.HTTP_200_OK)

    @extend_schema(request=None, responses={200: NotebookSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Start the server (idempotent); 400 saying why when it cannot start now (quota, capacity)."""
        return self._act(services.start_notebook)

    @extend_schema(request=None, responses={200: NotebookSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop the server; its files are kept."""
        return self._act(services.stop_notebook)

    @extend_schema(request=None, responses={200: NotebookSerializer})
    @action(detail=True, methods=["post"])
    def restart(self, request: Request, pk: str | None = None) -> Response:
        """A new server on the same files."""
        return self._act(services.restart_notebook)
