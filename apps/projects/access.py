"""The pages' permission choke point: `@project_view(perm, model=...)`.

It resolves `<project>` among the projects the user can see (else 404), checks the project
permission (else 403), and resolves `<pk>` of `model` inside that project (else 404). The
decorator records what it enforces on the view, so tests can walk every project page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.projects.models import Project
from apps.projects.permissions import VIEW, has_project_perm

View = Callable[..., HttpResponse]


def get_project_for(user: Any, slug: str, perm: str = VIEW) -> Project:
    """The project if the user may see it (else 404) and holds `perm` in it (else 403)."""
    project = get_object_or_404(Project.objects.for_user(user).select_related("quota"), slug=slug)
    if perm != VIEW and not has_project_perm(user, project, perm):
        raise PermissionDenied(_("Your role in this project does not allow this."))
    return project


def project_view(perm: str = VIEW, *, model: type[Model] | None = None, methods: tuple[str, ...] = ("GET", "POST")):
    """Decorate `view(request, project, [obj], **kwargs)`; the URL provides `project` (slug) and `pk`."""

    def decorate(view: View) -> View:
        @login_required
        @require_http_methods(list(methods))
        @wraps(view)
        def wrapper(request: HttpRequest, project: str, **kwargs: Any) -> HttpResponse:
            obj_project = get_project_for(request.user, project, perm)
            if model is not None:
                obj = get_object_or_404(model.objects.in_project(obj_project), pk=kwargs.pop("pk"))
                return view(request, obj_project, obj, **kwargs)
            return view(request, obj_project, **kwargs)

        wrapper.required_perm = perm  # type: ignore[attr-defined]
        wrapper.portal_model = model  # type: ignore[attr-defined]
        wrapper.allowed_methods = methods  # type: ignore[attr-defined]
        return wrapper

    return decorate
