from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.jobs.args import to_cli_args, validate_args
from apps.jobs.filters import JobTemplateFilterSet
from apps.jobs.forms import args_form_class
from apps.jobs.models import JobTemplate
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import VIEW


@project_view(VIEW, methods=("GET",))
def template_list(request: HttpRequest, project: Project) -> HttpResponse:
    """The newest version of each template (built-ins and the project's own), by category."""
    templates = JobTemplate.objects.in_project(project)
    newest = templates.values("project_id", "slug").annotate(v=Max("version"))
    keep = {(row["project_id"], row["slug"], row["v"]) for row in newest}
    filterset = JobTemplateFilterSet({"q": request.GET.get("q", "")}, queryset=templates)
    rows = [t for t in filterset.qs.order_by("category", "slug") if (t.project_id, t.slug, t.version) in keep]
    query = filterset.form.cleaned_data.get("q", "").strip().lower()
    categories: dict[str, list[JobTemplate]] = {}
    for template in rows:
        categories.setdefault(template.category, []).append(template)
    return render(request, "jobs/template_list.html", {"project": project, "categories": categories, "q": query})


@project_view(VIEW, model=JobTemplate, methods=("GET", "POST"))
def template_detail(request: HttpRequest, project: Project, template: JobTemplate) -> HttpResponse:
    """The template, and a form generated from its argument schema that previews the command line."""
    form = args_form_class(template.args_schema)(request.POST or None)
    command = None
    if request.method == "POST" and form.is_valid():
        args = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
        try:
            args = validate_args(template.args_schema, args, "args")
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                field = key.split(".", 1)[-1]
                form.add_error(field if field in form.fields else None, messages)
        else:
            command = [*template.command, *to_cli_args(template.args_schema, args)]
    versions = JobTemplate.objects.in_project(project).filter(slug=template.slug, project=template.project)
    return render(
        request,
        "jobs/template_detail.html",
        {"project": project, "template": template, "form": form, "command": command, "versions": versions},
        status=400 if form.errors else 200,
    )
