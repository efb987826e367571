from __future__ import annotations

from types import SimpleNamespace

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.jobs import services
from apps.jobs.api.serializers import JobTemplateSerializer
from apps.jobs.args import to_cli_args, validate_args
from apps.jobs.forms import ImageForm, TemplateForm, args_form_class
from apps.jobs.models import Image, JobTemplate
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.forms import add_service_errors


@project_view(VIEW, methods=("GET",))
def template_list(request: HttpRequest, project: Project) -> HttpResponse:
    """The newest version of each template (built-ins and the project's own), by category."""
    templates = JobTemplate.objects.in_project(project)
    newest = templates.values("project_id", "slug").annotate(v=Max("version"))
    keep = {(row["project_id"], row["slug"], row["v"]) for row in newest}
    query = request.GET.get("q", "").strip().lower()
    # Matched here, not in SQL: a built-in is shown (and found) in the user's language, which the rows lack.
    newest_rows = (t for t in templates.order_by("category", "slug") if (t.project_id, t.slug, t.version) in keep)
    rows = [t for t in newest_rows if t.matches(query)]
    categories: dict[str, list[JobTemplate]] = {}
    for template in rows:
        categories.setdefault(template.display_category, []).append(template)
    context = {
        "project": project, "categories": categories, "q": query,
        "can_create": has_project_perm(request.user, project, CONTRIBUTE),
    }  # fmt: skip
    return render(request, "jobs/template_list.html", context)


@project_view(CONTRIBUTE)
def template_create(request: HttpRequest, project: Project) -> HttpResponse:
    """Register a custom template (or the next version of one): checked by the API's serializer and service."""
    form = TemplateForm(request.POST or None, auto_id="template-%s")
    if request.method == "POST" and form.is_valid():
        session = SimpleNamespace(user=request.user, auth=None)  # what the serializer reads of a request: no token
        serializer = JobTemplateSerializer(data=form.data_for_api(project.slug), context={"request": session})
        if not serializer.is_valid():
            for field, errors in serializer.errors.items():
                if isinstance(errors, dict):  # resources: {"cpu": [...], ...}, each on its own field
                    for key, nested in errors.items():
                        form.add_error(key if key in form.fields else None, [str(e) for e in nested])
                else:
                    form.add_error(field if field in form.fields else None, [str(e) for e in errors])
        else:
            try:
                template = services.create_template(**serializer.validated_data)
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(request, _("Template %(ref)s registered.") % {"ref": template.ref})
                return redirect("jobs:template-detail", project=project.slug, pk=template.pk)
    images = Image.objects.in_project(project).order_by("name").values_list("name", flat=True)
    context = {"project": project, "form": form, "images": images}
    return render(request, "jobs/template_form.html", context, status=400 if form.errors else 200)


@project_view(VIEW)
def image_list(request: HttpRequest, project: Project) -> HttpResponse:
    """The images the project's templates may name (built-ins and its own); editors register and remove them."""
    can_create = has_project_perm(request.user, project, CONTRIBUTE)
    form = ImageForm(request.POST or None, instance=Image(project=project), auto_id="image-%s")
    if request.method == "POST":
        if not can_create:
            raise PermissionDenied
        if form.is_valid():
            image = form.save()
            messages.success(request, _("Image %(name)s registered.") % {"name": image.name})
            return redirect("jobs:image-list", project=project.slug)
    images = Image.objects.in_project(project).order_by("project_id", "name")
    context = {"project": project, "images": images, "form": form, "can_create": can_create}
    return render(request, "jobs/image_list.html", context, status=400 if form.errors else 200)


@project_view(CONTRIBUTE, model=Image, methods=("POST",))
def image_delete(request: HttpRequest, project: Project, image: Image) -> HttpResponse:
    if image.project_id is None:
        raise PermissionDenied(_("Built-in images cannot be changed."))
    name = image.name
    image.delete()
    messages.success(request, _("Image %(name)s removed.") % {"name": name})
    return redirect("jobs:image-list", project=project.slug)


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
