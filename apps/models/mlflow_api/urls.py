"""Routes of the MLflow API: the client's `/api/2.0/mlflow/…`, the UI's `/ajax-api/2.0/mlflow/…` and the
proxied artifact service `/api/2.0/mlflow-artifacts/…`."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from apps.models.mlflow_api import registry, tracking
from apps.models.mlflow_api.artifacts import artifact_view
from apps.models.mlflow_api.base import Router

router = Router()
router.routes = tracking.router.routes + registry.router.routes


@csrf_exempt
def mlflow_view(request: HttpRequest, endpoint: str) -> HttpResponse:
    return router.dispatch(request, endpoint)


urlpatterns = [
    re_path(r"^(?:ajax-)?api/2\.0/mlflow/(?P<endpoint>.+)$", mlflow_view, name="mlflow"),
    re_path(r"^(?:ajax-)?api/3\.0/mlflow/server-info$", tracking.server_info, name="mlflow-server-info"),
    path("api/2.0/mlflow-artifacts/artifacts", artifact_view, name="mlflow-artifacts-root"),
    path("api/2.0/mlflow-artifacts/artifacts/", artifact_view),
    path("api/2.0/mlflow-artifacts/artifacts/<path:path>", artifact_view, name="mlflow-artifacts"),
    re_path(r"^ajax-api/2\.0/mlflow-artifacts/artifacts/(?P<path>.*)$", artifact_view),
]
