"""Where the MLflow UI's links land. The official client prints `…/#/experiments/<id>/runs/<run_id>`, and people
paste MLflow UI links (`#/models/<name>/versions/<n>`): the fragment never reaches the server, so every page loads
`static/js/mlflow-links.js`, which sends the fragment's ids here, and this view redirects to the portal's page of
that object — for whoever may see it (others get a 404, as on the page itself).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe

from apps.models.models import Experiment, ModelVersion, RegisteredModel, Run
from apps.projects.permissions import VIEW


@login_required
@require_safe
def mlflow_link(request: HttpRequest) -> HttpResponse:
    """`?run=<run id>`, `?experiment=<id>`, `?model=<name>[&version=<n>]` → the page of that run, experiment,
    registered model or version."""
    user, query = request.user, request.GET
    if query.get("run"):
        run = Run.objects.for_user(user, VIEW).select_related("project").filter(run_uuid=query["run"]).first()
        if run is not None:
            return redirect("models:run-detail", project=run.project.slug, pk=run.pk)
    elif query.get("experiment", "").isdigit():
        experiment = Experiment.objects.for_user(user, VIEW).select_related("project").filter(pk=query["experiment"])
        if (found := experiment.first()) is not None:
            return redirect("models:experiment-detail", project=found.project.slug, pk=found.pk)
    elif query.get("model"):
        model = _registered_model(user, query["model"])
        if model is not None and query.get("version"):
            version = ModelVersion.objects.filter(registered_model=model, version=query["version"]).first()
            if version is not None:
                return redirect("models:version-detail", project=model.project.slug, pk=version.pk)
        elif model is not None:
            return redirect("models:model-detail", project=model.project.slug, pk=model.pk)
    raise Http404(_("Nothing you can see is at this MLflow link."))


def _registered_model(user: object, name: str) -> RegisteredModel | None:
    """A model by its MLflow name: `project-slug/name` (what a token without a project uses), or a bare name when
    exactly one of the user's projects has it (a bare name in several is ambiguous: no guess)."""
    models = RegisteredModel.objects.for_user(user, VIEW).select_related("project")
    slug, _sep, bare = name.partition("/")
    if bare:
        found = models.filter(project__slug=slug, name=bare).first()
        if found is not None:
            return found
    matches = list(models.filter(name=name)[:2])
    return matches[0] if len(matches) == 1 else None
