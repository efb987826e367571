from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.jobs import schedules, services
from apps.jobs.dryrun import choose_cluster, cluster_choices, dry_run
from apps.jobs.filters import PipelineFilterSet
from apps.jobs.forms import BackfillForm, PipelineYamlForm, ScheduleForm
from apps.jobs.graph import layout
from apps.jobs.models import Pipeline, PipelineRun
from apps.jobs.yaml_io import dump_pipeline, load_pipeline
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.errors import Conflict
from portal.lib.listing import listing

EXAMPLE = """apiVersion: portal/v1
kind: Pipeline
metadata:
  name: hello
  description: Two steps; the second reads the first one's output.
spec:
  nodes:
    - name: write
      template: python
      args:
        code: "open('greeting.txt', 'w').write('hello')"
    - name: read
      template: python
      depends_on: [write]
      args:
        code: "import os; print(open(os.environ['PORTAL_INPUT_WRITE'] + '/greeting.txt').read())"
"""


def _save_from_yaml(form: PipelineYamlForm, project: Project, user, pipeline: Pipeline | None = None):
    """Save the YAML; each error lands on the form with the node and field it is about."""
    try:
        name, description, spec = load_pipeline(form.cleaned_data["yaml"])
        return services.save_pipeline(project, user, name=name, spec=spec, description=description, pipeline=pipeline)
    except ValidationError as exc:
        for key, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(None, error if key in ("yaml", "__all__") else f"{key}: {error}")
        return None


@project_view(VIEW, methods=("GET",))
def pipeline_list(request: HttpRequest, project: Project) -> HttpResponse:
    # Two queries whatever the number of pipelines: the newest run's id per pipeline, then those runs
    # (prefetching every run of every pipeline to show one each would load a project's whole history).
    newest = PipelineRun.objects.filter(pipeline=OuterRef("pk")).order_by("-created_at", "-pk").values("pk")[:1]
    pipelines = Pipeline.objects.filter(project=project).annotate(last_run_id=Subquery(newest)).order_by("name", "pk")
    found = listing(request, PipelineFilterSet, pipelines)
    page = list(found.page.object_list)
    last_runs = PipelineRun.objects.in_bulk([p.last_run_id for p in page if p.last_run_id is not None])
    rows = [(p, last_runs.get(p.last_run_id)) for p in page]
    context = {"project": project, "rows": rows, "listing": found}
    return render(request, "jobs/pipeline_list.html", context, status=found.status)


@project_view(CONTRIBUTE)
def pipeline_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = PipelineYamlForm(request.POST or None, initial={"yaml": EXAMPLE})
    if request.method == "POST" and form.is_valid():
        pipeline = _save_from_yaml(form, project, request.user)
        if pipeline is not None:
            messages.success(request, _("Pipeline “%(name)s” saved.") % {"name": pipeline.name})
            return redirect("jobs:pipeline-detail", project=project.slug, pk=pipeline.pk)
    return render(
        request, "jobs/pipeline_form.html", {"project": project, "form": form}, status=400 if form.errors else 200
    )


@project_view(VIEW, model=Pipeline)
def pipeline_detail(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    """The DAG picture, the YAML editor (saving validates), the schedules and the recent runs."""
    form = PipelineYamlForm(
        request.POST or None, initial={"yaml": dump_pipeline(pipeline.name, pipeline.description, pipeline.spec)}
    )
    if request.method == "POST":
        if not has_project_perm(request.user, project, CONTRIBUTE):
            raise PermissionDenied
        if form.is_valid() and _save_from_yaml(form, project, request.user, pipeline) is not None:
            messages.success(request, _("Pipeline saved."))
            return redirect("jobs:pipeline-detail", project=project.slug, pk=pipeline.pk)
    return render_detail(request, project, pipeline, form=form, status=400 if form.errors else 200)


def render_detail(
    request: HttpRequest, project: Project, pipeline: Pipeline, *, status: int = 200, **extra: Any
) -> HttpResponse:
    """The pipeline page, with the forms a failed action hands back (`schedule_form`, `backfill_form`) in `extra`."""
    form = extra.pop("form", None) or PipelineYamlForm(
        initial={"yaml": dump_pipeline(pipeline.name, pipeline.description, pipeline.spec)}
    )
    pipeline_schedules = list(pipeline.schedules.order_by("pk"))
    now = timezone.now()
    failed = extra.pop("backfill_schedule", None)
    for schedule in pipeline_schedules:
        schedule.next_dates = schedules.next_dates(schedule, 3, now)  # type: ignore[attr-defined]
        schedule.backfill_form = (  # type: ignore[attr-defined]
            extra["backfill_form"]
            if failed is not None and failed.pk == schedule.pk
            else BackfillForm(
                auto_id=f"backfill-{schedule.pk}-%s",
                initial={"start": now.date() - timedelta(days=7), "end": now.date()},
            )
        )
        schedule.backfill_open = failed is not None and failed.pk == schedule.pk  # type: ignore[attr-defined]
    context = {
        "project": project,
        "pipeline": pipeline,
        "form": form,
        "graph": layout(pipeline.spec),
        "runs": pipeline.runs.all()[:10],
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
        "schedules": pipeline_schedules,
        "schedule_count": len(pipeline_schedules),
        "schedule_form": ScheduleForm(auto_id="schedule-%s"),
        **{k: v for k, v in extra.items() if k != "backfill_form"},
    }
    return render(request, "jobs/pipeline_detail.html", context, status=status)


@project_view(CONTRIBUTE, model=Pipeline, methods=("POST",))
def pipeline_run(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    try:
        run = services.start_run(pipeline, request.user, ignore_cache=bool(request.POST.get("ignore_cache")))
    except ValidationError as exc:
        messages.error(request, _("The pipeline cannot run: %(errors)s") % {"errors": " ".join(exc.messages)})
        return redirect("jobs:pipeline-detail", project=project.slug, pk=pipeline.pk)
    return redirect("jobs:run-detail", project=project.slug, pk=run.pk)


@project_view(CONTRIBUTE, model=Pipeline, methods=("POST",))
def pipeline_duplicate(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    """A copy named "<name>-copy" (rename it in the editor or the YAML), opened at once."""
    copy = services.duplicate_pipeline(pipeline, request.user)
    messages.success(request, _("Copied %(name)s to %(copy)s.") % {"name": pipeline.name, "copy": copy.name})
    return redirect("jobs:pipeline-detail", project=project.slug, pk=copy.pk)


@project_view(CONTRIBUTE, model=Pipeline, methods=("POST",))
def pipeline_delete(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    name = pipeline.name
    try:
        services.delete_pipeline(pipeline)
    except Conflict as exc:  # a retrain policy runs it
        messages.error(request, exc.message)
        return redirect("jobs:pipeline-detail", project=project.slug, pk=pipeline.pk)
    messages.success(request, _("Pipeline %(name)s deleted; its runs are kept.") % {"name": name})
    return redirect("jobs:pipeline-list", project=project.slug)


@project_view(VIEW, model=Pipeline, methods=("GET",))
def pipeline_export(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    response = HttpResponse(
        dump_pipeline(pipeline.name, pipeline.description, pipeline.spec), content_type="application/yaml"
    )
    response["Content-Disposition"] = f'attachment; filename="{pipeline.name}.yaml"'
    return response


@project_view(VIEW, model=Pipeline, methods=("GET",))
def pipeline_manifests(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    """Dry run: the Kubernetes objects a run would create on one of the project's clusters (nothing is applied).
    `?download=1` answers the multi-document YAML itself."""
    context: dict = {"project": project, "pipeline": pipeline, "choices": cluster_choices(project)}
    try:
        cluster, namespace = choose_cluster(project, request.GET.get("cluster", ""))
        result = dry_run(pipeline, cluster, namespace)
    except (LookupError, ValidationError) as exc:
        message = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        # No cluster at all, or a pipeline that no longer validates, is the state of things (200); a cluster
        # that the query names and the project cannot use is a bad request.
        status = 400 if request.GET.get("cluster") and context["choices"] else 200
        if request.GET.get("download"):
            return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
        return render(request, "jobs/pipeline_manifests.html", {**context, "error": message}, status=status)
    if request.GET.get("download"):
        response = HttpResponse(result.yaml(), content_type="application/yaml")
        response["Content-Disposition"] = f'attachment; filename="{pipeline.name}-{cluster.name}.yaml"'
        return response
    return render(request, "jobs/pipeline_manifests.html", {**context, "cluster": cluster, "result": result})
