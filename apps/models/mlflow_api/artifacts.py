"""The proxied artifact service (`/api/2.0/mlflow-artifacts/artifacts/<path>`): upload (PUT, streamed from the
request), download (GET, streamed file response), list (GET ?path=) and delete. Paths start with the
experiment id, which decides the project: other tenants' paths do not exist."""

from __future__ import annotations

import mimetypes
import posixpath

from django.http import FileResponse, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from apps.models import artifacts
from apps.models.access import Caller
from apps.models.errors import BadEndpoint, NotFound, TrackingError
from apps.models.mlflow_api.base import caller_for, error_response, json_response
from apps.models.models import Experiment
from portal.lib.bodylimit import declared_length


def _check(caller: Caller, path: str, *, write: bool) -> None:
    experiment_id = artifacts.experiment_id_of(path)
    project_id = Experiment.objects.filter(pk=experiment_id).values_list("project_id", flat=True).first()
    if project_id is None or project_id not in caller.visible:
        raise NotFound(f"No such artifact path: '{path}'")
    if write:
        caller.check_write(project_id)


@csrf_exempt
def artifact_view(request: HttpRequest, path: str = "") -> HttpResponse:
    try:
        caller = caller_for(request)
        if not path:
            if request.method != "GET":
                raise BadEndpoint(f"Method {request.method} is not allowed here.")
            return _list(caller, artifacts.clean_path(request.GET.get("path")))
        path = artifacts.clean_path(path, allow_empty=False)
        if request.method in ("GET", "HEAD"):
            _check(caller, path, write=False)
            handle = artifacts.open_file(path)
            if handle is None:
                raise NotFound(f"No such artifact: '{path}'")
            content_type = mimetypes.guess_type(posixpath.basename(path))[0] or "application/octet-stream"
            return FileResponse(handle, content_type=content_type)
        if request.method == "PUT":
            _check(caller, path, write=True)
            if artifacts.is_dir(path):
                raise NotFound(f"'{path}' is a directory.")
            artifacts.save(path, request, declared_length(request.META) or None)
            return json_response({})
        if request.method == "DELETE":
            _check(caller, path, write=True)
            artifacts.delete(path)
            return json_response({})
        raise BadEndpoint(f"Method {request.method} is not allowed here.")
    except TrackingError as error:
        return error_response(error)


def _list(caller: Caller, path: str) -> HttpResponse:
    if not path:  # the root lists the caller's experiments
        ids = Experiment.objects.filter(project_id__in=list(caller.visible)).values_list("pk", flat=True)
        return json_response({"files": [{"path": str(pk), "is_dir": True} for pk in ids]})
    _check(caller, path, write=False)
    return json_response({"files": artifacts.list_dir(path)})
