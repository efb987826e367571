"""The drag-and-drop pipeline editor (static/js/editor/, docs/pipeline-editor.md).

The page only hands the browser what it needs to draw and check a pipeline: the pipeline, the project's job
templates with their argument schemas, the project's limits and the names a node's arguments may refer to.
Saving and running go through the pipelines API (the same `save_pipeline` and `start_run` as YAML and the
API), so the editor stores exactly the spec that the YAML editor shows; `pipeline_validate` checks a spec
without saving it.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.datasets.models import Dataset
from apps.jobs import services
from apps.jobs.args import ordered_properties, portal_type
from apps.jobs.dag import MAX_RETRIES
from apps.jobs.models import JobTemplate, Pipeline
from apps.jobs.references import registered_choices
from apps.projects.access import project_view
from apps.projects.models import Project, ProjectSecret
from apps.projects.permissions import CONTRIBUTE, has_project_perm
from apps.runtime.admission import node_limits
from apps.runtime.placement import runtime_name_for
from apps.runtime.workload import total_replicas
from portal.lib import untrusted

MAX_BODY_BYTES = 2 * 1024 * 1024  # a spec is small; the request limit of the site is larger for uploads
MAX_NAME_LENGTH = 100  # Pipeline.name
SLUG_RE = re.compile(r"^[-a-zA-Z0-9_]+\Z")  # Pipeline.name is a SlugField


def template_entry(template: JobTemplate, runtime: str = "") -> dict[str, Any]:
    """A template as the palette and the node form need it: the arguments as an ordered list (jsonb does not
    keep the schema's key order) with their widget type made explicit."""
    schema = template.args_schema or {}
    required = set(schema.get("required") or [])
    args = []
    for name, prop in ordered_properties(schema).items():
        if not isinstance(prop, dict):
            continue
        args.append({**prop, "name": name, "type": portal_type(prop), "required": name in required})
    return {
        "slug": template.slug,
        "version": template.version,
        "ref": template.ref,
        # Shown to a person: a built-in's text in the user's language (the REST API keeps the stored text).
        "name": template.display_name,
        "category": template.display_category or "general",
        "description": template.display_description,
        "search": template.search_text,
        "args": args,
        "resources": template.resources or {},
        "timeout": template.timeout,
        "kind": template.kind,
        "framework": template.framework,
        "replicas": template.replicas or {},
        # A node of it holds its resources × this where the project's work runs.
        "replica_count": total_replicas(
            template.kind, template.replicas, framework=template.framework, runtime=runtime
        ),
        "strategy": template.strategy or {},
        "own": template.project_id is not None,
    }


def palette_templates(project: Project, spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The newest version of each template the project can use (its own before a built-in of the same slug,
    as `resolve_template` decides), plus the exact versions that the spec's nodes pin (`slug@3`)."""
    newest: dict[str, JobTemplate] = {}
    for template in JobTemplate.objects.in_project(project).order_by("category", "name", "slug"):
        current = newest.get(template.slug)
        # (is the project's own, version): the project's own template wins over a built-in, then the newest.
        if current is None or (template.project_id is not None, template.version) > (
            current.project_id is not None,
            current.version,
        ):
            newest[template.slug] = template
    runtime = runtime_name_for(project)
    entries = [{**template_entry(t, runtime), "latest": True} for t in newest.values()]
    pinned = {
        str(node.get("template"))
        for node in (spec or {}).get("nodes") or []
        if isinstance(node, dict) and "@" in str(node.get("template", ""))
    }
    known = {entry["ref"] for entry in entries}
    for ref in sorted(pinned - known):
        template = services.resolve_template(project, ref)
        if template is not None:
            entries.append({**template_entry(template, runtime), "latest": False})
    return entries


def reference_choices(project: Project) -> dict[str, list[str]]:
    """Names that `dataset`, `model` and `secret` arguments may take (names only, never a secret's value)."""
    return {
        "dataset": list(Dataset.objects.filter(project=project).order_by("name").values_list("name", flat=True)),
        **registered_choices(project),  # `model`, from the models app
        "secret": list(ProjectSecret.objects.filter(project=project).order_by("name").values_list("name", flat=True)),
    }


def editor_data(request: HttpRequest, project: Project, pipeline: Pipeline | None) -> dict[str, Any]:
    """Everything the editor's script starts from (rendered with json_script: data, never code)."""
    spec = pipeline.spec if pipeline is not None else None
    limits = node_limits(project).to_json()
    return {
        "project": project.slug,
        "pipeline": (
            {
                "id": pipeline.pk,
                "name": pipeline.name,
                "description": pipeline.description,
                "spec": pipeline.spec,
                "layout": pipeline.layout or {},
            }
            if pipeline is not None
            else None
        ),
        "templates": palette_templates(project, spec),
        # Each distributed node's layout ("world 8 = dp 2 × tp 2 × pp 2, …"); the check below sends it afresh.
        "layouts": services.strategy_layouts(project, spec),
        "limits": limits,
        "max_retries": MAX_RETRIES,
        "choices": reference_choices(project),
        "urls": {
            "api": reverse("api:pipeline-list"),
            "validate": reverse("jobs:pipeline-validate", kwargs={"project": project.slug}),
            # Filled in by the script with the id of the saved pipeline or the started run.
            "editor": reverse("jobs:pipeline-editor", kwargs={"project": project.slug, "pk": 0}),
            "detail": reverse("jobs:pipeline-detail", kwargs={"project": project.slug, "pk": 0}),
            "run": reverse("jobs:run-detail", kwargs={"project": project.slug, "pk": 0}),
        },
        "can_run": has_project_perm(request.user, project, CONTRIBUTE),
    }


def _render(request: HttpRequest, project: Project, pipeline: Pipeline | None) -> HttpResponse:
    context = {
        "project": project,
        "pipeline": pipeline,
        "editor_data": editor_data(request, project, pipeline),
        "editor_messages": editor_messages(),
    }
    return render(request, "jobs/pipeline_editor.html", context)


@project_view(CONTRIBUTE, methods=("GET",))
def pipeline_editor_new(request: HttpRequest, project: Project) -> HttpResponse:
    """The editor with an empty canvas; the first save creates the pipeline."""
    return _render(request, project, None)


@project_view(CONTRIBUTE, model=Pipeline, methods=("GET",))
def pipeline_editor(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    return _render(request, project, pipeline)


@project_view(CONTRIBUTE, methods=("POST",))
def pipeline_validate(request: HttpRequest, project: Project) -> JsonResponse:
    """Check a pipeline as saving would, without saving. Body: {"spec": {...}, "name": "...", "pipeline": id|null}.

    A check that ran answers 200 with `{"valid": bool, "errors": {...}}` (and `layouts`, {node: "world 8 = dp 2 × …"},
    for the nodes with a distributed strategy that can run), the errors keyed like the API's
    ("name", "nodes.<node>.args.<arg>"): an invalid pipeline is the answer, not a failed request (the editor
    checks before it saves, so a browser console stays free of failed requests). A body that is not JSON is 400.
    """
    if len(request.body) > MAX_BODY_BYTES:
        return JsonResponse({"valid": False, "errors": {"spec": [_("The spec is too large.")]}}, status=400)
    try:
        body = untrusted.loads(request.body or b"{}")
    except untrusted.UnsafeInput as exc:  # NUL, a lone surrogate or nesting past the limit: a 400 on its field
        return JsonResponse({"valid": False, "errors": {exc.field or "spec": [exc.detail]}}, status=400)
    except (ValueError, UnicodeDecodeError):
        return JsonResponse({"valid": False, "errors": {"spec": [_("The body must be JSON.")]}}, status=400)
    if not isinstance(body, dict):
        return JsonResponse({"valid": False, "errors": {"spec": [_("The body must be a JSON object.")]}}, status=400)
    errors: dict[str, list[str]] = {}
    if "name" in body:
        errors.update(_name_errors(project, body.get("name"), body.get("pipeline")))
    try:
        services.normalize_spec(project, body.get("spec"))
    except ValidationError as exc:
        errors.update(exc.message_dict if hasattr(exc, "error_dict") else {"spec": exc.messages})
    answer: dict[str, Any] = {"valid": not errors, "errors": errors}
    layouts = services.strategy_layouts(project, body.get("spec"))
    if layouts:  # distributed nodes with a strategy: the properties panel shows each one's layout
        answer["layouts"] = layouts
    return JsonResponse(answer)


def _name_errors(project: Project, name: Any, pipeline_id: Any) -> dict[str, list[str]]:
    """What the API would say about the pipeline's name (its serializer's rules, then the service's)."""
    if not isinstance(name, str) or not name.strip():
        return {"name": [_("This field may not be blank.")]}
    if len(name) > MAX_NAME_LENGTH or not SLUG_RE.match(name):
        return {"name": [_("Use up to 100 letters, numbers, underscores or hyphens.")]}
    return services.pipeline_name_errors(project, name, pipeline_id if isinstance(pipeline_id, int) else None)


def editor_messages() -> dict[str, str]:
    """The editor script's words, translated here (the script has no catalogue of its own)."""
    return {
        "saved": _("Saved."),
        "editing": _("Editing %(name)s"),
        "pageTitle": _("Edit %(name)s"),
        "saving": _("Saving…"),
        "valid": _("The pipeline is valid."),
        "invalidNodes": _("Problems on %(count)s node(s): they are outlined in red; select one to see what is wrong."),
        "invalidPipeline": _("Problems with the pipeline: %(errors)s"),
        "saveFailed": _("Could not save: %(error)s"),
        "networkError": _("The server could not be reached."),
        "starting": _("Starting a run…"),
        "runFailed": _("Could not start a run: %(error)s"),
        "cycle": _("Refused: this edge would make a cycle (%(path)s)."),
        "duplicateEdge": _("These nodes are already connected."),
        "selfEdge": _("A node cannot depend on itself."),
        "added": _("Added node “%(name)s”."),
        "deleted": _("Deleted %(count)s node(s)."),
        "copied": _("Copied %(count)s node(s)."),
        "pasted": _("Pasted %(count)s node(s)."),
        "nothingSelected": _("Select a node first."),
        "laidOut": _("Laid out the graph."),
        "unsaved": _("You have unsaved changes."),
        "required": _("Required."),
        "notInteger": _("Enter a whole number."),
        "notNumber": _("Enter a number."),
        "notJson": _("Enter valid JSON."),
        "atLeast": _("Must be at least %(limit)s."),
        "atMost": _("Must be at most %(limit)s."),
        "above": _("Must be greater than %(limit)s."),
        "below": _("Must be less than %(limit)s."),
        "minLength": _("Enter at least %(limit)s characters."),
        "maxLength": _("Enter at most %(limit)s characters."),
        "pattern": _("Does not match the pattern %(pattern)s."),
        "overLimit": _("The limit is %(limit)s (%(source)s)."),
        "overLimitReplicas": _("%(replicas)s replicas ask for %(total)s; the limit is %(limit)s (%(source)s)."),
        "memory": _("Use e.g. 512Mi, 2Gi or a number of bytes."),
        "nodeName": _("Use 1–63 lowercase letters, digits, “-” or “_”, starting with a letter or digit."),
        "nameTaken": _("Another node already has this name."),
        "default": _("default: %(value)s"),
        "useDefault": _("(template default)"),
        "none": _("none"),
        "unknownTemplate": _("Unknown template “%(ref)s”."),
        "noTemplates": _("No template matches."),
        "errorsOnNode": _("%(count)s problem(s) on this node."),
        "pipelineErrors": _("Problems with the pipeline"),
        "nodeLabel": _("Node %(name)s, template %(template)s"),
        "statusLabel": _("Node %(name)s: %(status)s. Press Enter for its logs."),
        "leave": _("Leave the editor? Unsaved changes are lost."),
        # Labels of the side panel
        "pipeline": _("Pipeline"),
        "pipelineName": _("Name"),
        "pipelineNameHelp": _("Letters, digits, “-” and “_”."),
        "description": _("Description"),
        "parallelism": _("Parallelism"),
        "parallelismHelp": _("Nodes that may run at once; 0 for no limit."),
        "priority": _("Priority"),
        "priorityHelp": _("Higher runs are dispatched first."),
        "failurePolicy": _("When a node fails"),
        "policy_fail_fast": _("Stop at the first failure"),
        "policy_continue": _("Run every node that can still run"),
        "nodes": _("Nodes"),
        "emptyCanvas": _("Drag a template from the palette onto the canvas, or select one and press Enter."),
        "name": _("Node name"),
        "duplicate": _("Duplicate"),
        "deleteNode": _("Delete"),
        "arguments": _("Arguments"),
        "noArguments": _("This template takes no arguments."),
        "argsJson": _("Arguments (JSON)"),
        "dependsOn": _("Runs after"),
        "noOtherNodes": _("No other node yet."),
        "resources": _("Resources"),
        "cpu": _("CPU cores"),
        "memoryLabel": _("Memory"),
        "memoryHelp": _("e.g. 512Mi or 2Gi"),
        "gpu": _("GPUs"),
        "gpuType": _("GPU type"),
        "execution": _("Retries, timeout and caching"),
        "retries": _("Retries"),
        "retryBackoff": _("Seconds before a retry"),
        "timeout": _("Timeout (seconds)"),
        "skip": _("Skip this node (it counts as done)"),
        "cache": _("Reuse the output of an identical earlier run"),
        "env": _("Environment"),
        "envHelp": _("One NAME=value per line; ${secret:NAME} refers to a project secret."),
        "envLine": _("Line %(line)s is not NAME=value."),
        "ownTemplate": _("this project"),
        "strategy": _("Distributed strategy"),
        "strategyHelp": _(
            "JSON overriding the template's strategy key by key: type (ddp, fsdp, deepspeed, horovod), zero_stage, "
            "tensor_parallel, pipeline_parallel, precision (fp32, fp16, bf16), gradient_checkpointing, "
            "gradient_accumulation."
        ),
        "strategyTemplate": _("Template's strategy: %(strategy)s"),
        "layout": _("Layout: %(layout)s"),
        "layoutUnknown": _("Check the pipeline to see the layout."),
    }
