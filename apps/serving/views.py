"""Service pages: the project's list, the new/edit form, a service's page (status and rollout, test console, traffic
charts, replicas with their log tails, revision history with rollback, canary and shadow controls, the service key)
and its actions. Members see; editors change. Every action goes through apps.serving.services."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import requests
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.models.models import ModelVersion
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from apps.runtime.workload import format_memory
from apps.serving import console, payloads, services
from apps.serving.filters import InferenceServiceFilterSet
from apps.serving.forms import ServiceForm, example_request
from apps.serving.models import Framework, InferenceService, Replica, Revision
from apps.serving.replicas import default_framework
from apps.serving.services.events import TRANSITIONAL
from apps.serving.services.metrics import requests_per_second_by_service
from portal.lib.forms import add_service_errors
from portal.lib.listing import listing

METADATA_TIMEOUT = 2.0


def _detail_url(service: InferenceService) -> str:
    return reverse("serving:service-detail", kwargs={"project": service.project.slug, "pk": service.pk})


class Row:
    """A service as the list shows it."""

    def __init__(self, service: InferenceService, qps: float | None) -> None:
        self.service = service
        current = service.current_revision
        self.ready, self.wanted = service.replica_counts()
        self.qps = qps
        if service.model_version_id:
            self.serves = f"{service.registered_model.name} v{service.model_version.version}"
        elif service.follow_alias:
            self.serves = f"{service.registered_model.name}@{service.follow_alias}"
        else:
            self.serves = service.get_framework_display()
        self.version = current.config.get("model_version") if current else None


@project_view(VIEW, methods=("GET",))
def service_list(request: HttpRequest, project: Project) -> HttpResponse:
    qs = (
        InferenceService.objects.filter(project=project)
        .select_related("project", "registered_model", "model_version", "current_revision")
        .prefetch_related(
            Prefetch("current_revision__replicas", queryset=Replica.objects.only("revision_id", "status"))
        )
        .order_by("name", "pk")
    )
    found = listing(request, InferenceServiceFilterSet, qs)
    services_shown = list(found.page.object_list)
    qps = requests_per_second_by_service(services_shown)
    context = {
        "project": project,
        "listing": found,
        "rows": [Row(service, qps.get(service.pk)) for service in services_shown],
        "can_create": has_project_perm(request.user, project, CONTRIBUTE),
    }
    if request.htmx:
        return render(request, "serving/partials/table.html", context, status=found.status)
    return render(request, "serving/service_list.html", context, status=found.status)


@project_view(CONTRIBUTE)
def service_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = ServiceForm(project, request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            service = services.create_service(
                project,
                request.user,
                name=form.cleaned_data["name"],
                deploy=bool(request.POST.get("deploy")),
                **form.settings(),
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Service “%(name)s” created.") % {"name": service.name})
            return redirect(_detail_url(service))
    return render(request, "serving/service_form.html", {"project": project, "form": form, "service": None})


@project_view(CONTRIBUTE, model=InferenceService)
def service_edit(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    form = ServiceForm(project, request.POST or None, service=service)
    if request.method == "POST" and form.is_valid():
        try:
            service, redeploy = services.update_service(service, **form.settings())
            if request.POST.get("deploy"):
                services.deploy(service, request.user)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            if redeploy and not request.POST.get("deploy"):
                messages.info(request, _("Saved. What the replicas run changed: deploy to roll it out."))
            else:
                messages.success(request, _("Saved."))
            return redirect(_detail_url(service))
    return render(request, "serving/service_form.html", {"project": project, "form": form, "service": service})


# The test console's first request to an llm service (non-streaming: the console shows the JSON answer).
CHAT_EXAMPLE = {"messages": [{"role": "user", "content": "Say hello in one sentence."}], "max_tokens": 64}


def _metadata(service: InferenceService) -> tuple[dict[str, Any] | None, str]:
    """The model's OIP metadata from a ready replica of the current revision (for the console), or why not."""
    current = service.current_revision
    replica = current.replicas.filter(status=Replica.Status.READY).first() if current else None
    if replica is None or not replica.upstream:
        return None, _("No replica is ready: the console works once the service serves.")
    name = current.config.get("model_name") or service.name
    try:
        response = requests.get(f"{replica.upstream}/v2/models/{name}", timeout=METADATA_TIMEOUT)
        response.raise_for_status()
        return response.json(), ""
    except (requests.RequestException, ValueError) as exc:
        return None, _("The model's metadata could not be read: %(e)s") % {"e": exc}


def _context(request: HttpRequest, project: Project, service: InferenceService) -> dict[str, Any]:
    revisions = list(
        service.revisions.select_related("model_version", "created_by").prefetch_related(
            Prefetch("replicas", queryset=Replica.objects.order_by("index"))
        )
    )
    serving_ids = {service.current_revision_id, service.canary_revision_id, service.shadow_revision_id}
    return {
        "project": project,
        "service": service,
        "revisions": revisions,
        "serving": [r for r in revisions if r.pk in serving_ids or r.status == Revision.Status.ROLLING_OUT],
        "rolling": [r for r in revisions if r.status == Revision.Status.ROLLING_OUT],
        "can_change": has_project_perm(request.user, project, CONTRIBUTE),
        "memory": format_memory(service.memory_bytes),
        # As the project's events say it (apps/serving/services/events.py): the page redraws what serves once it is.
        "settled": not any(r.status == Revision.Status.ROLLING_OUT for r in revisions)
        and service.status not in TRANSITIONAL,
        "roles": Revision.Role,
    }


@project_view(VIEW, model=InferenceService, methods=("GET",))
def service_detail(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    return _render_detail(request, project, service)


def _render_detail(request: HttpRequest, project: Project, service: InferenceService, **extra: Any) -> HttpResponse:
    context = _context(request, project, service)
    metadata, console_note = _metadata(service)
    current = service.current_revision
    model_name = (current.config.get("model_name") if current else None) or service.name  # as _metadata reads it
    chat = bool(metadata) and metadata.get("platform") == "llm"  # an llm replica: OpenAI's chat API
    if chat:
        example = json.dumps(CHAT_EXAMPLE | {"model": model_name}, indent=2, ensure_ascii=False)
        console_url = f"{service.base_path}v1/chat/completions"
    else:
        example = example_request(metadata.get("inputs") or []) if metadata else ""
        console_url = f"{service.base_path}v2/models/{model_name}/infer"
    features = console.features(metadata) if metadata and not chat and console.one_row_input(metadata) else []
    if features:  # one field per feature, starting from zeros; the JSON view shows the same request
        example = json.dumps(console.row_request(metadata, [0] * len(features)), indent=2)
    context.update(
        metadata=metadata,
        console_note=console_note,
        example=example,
        chat=chat,
        console_url=console_url,
        absolute_console_url=request.build_absolute_uri(console_url),
        features=features,
        # Per-row SHAP values need rows of numeric features (apps/serving/modelserver/explain.py).
        explainable=bool(features) and (metadata.get("inputs") or [{}])[0].get("datatype") not in ("BYTES", "BOOL"),
        input_spec=(metadata.get("inputs") or [{}])[0] if metadata else {},
        model_name=model_name,
        payload={"logged": service.payload_logs.count(), "accuracy": payloads.accuracy(service)},
        **extra,
    )
    return render(request, "serving/service_detail.html", context)


@project_view(VIEW, model=InferenceService, methods=("GET",))
def service_status(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    """The live part of the page (status, rollout, replicas), fetched again whenever the project's events socket
    says the service changed (static/js/live.js). Once a rollout settles, the page also fetches itself and swaps in
    the parts drawn from what serves (the console, the revisions, the canary and shadow controls): no reload."""
    return render(request, "serving/partials/status.html", _context(request, project, service))


# --- Actions (POST) -----------------------------------------------------------------------------------------------


def _deploy(request: HttpRequest, service: InferenceService) -> str:
    revision = services.deploy(service, request.user)
    if revision is None:
        service.refresh_from_db()
        return service.reason
    return _("Rolling out r%(n)d; the current revision serves until it is ready.") % {"n": revision.number}


def _rollback(request: HttpRequest, service: InferenceService) -> str:
    revision = services.rollback(service, request.user, request.POST.get("revision"))
    return _("Rolling out r%(n)d with the version and config of r%(old)s.") % {
        "n": revision.number, "old": request.POST.get("revision"),
    }  # fmt: skip


def _canary(request: HttpRequest, service: InferenceService) -> str:
    revision = services.deploy_canary(
        service, request.user, request.POST.get("percent"), request.POST.get("model_version") or None
    )
    return _("Canary r%(n)d is rolling out.") % {"n": revision.number}


def _shadow(request: HttpRequest, service: InferenceService) -> str:
    revision = services.deploy_shadow(
        service, request.user, request.POST.get("percent"), request.POST.get("model_version") or None
    )
    return _("Shadow r%(n)d is rolling out.") % {"n": revision.number}


def _traffic(request: HttpRequest, service: InferenceService) -> str:
    services.set_traffic(service, request.POST.get("role", ""), request.POST.get("percent"))
    return _("Traffic moved.")


def _promote(request: HttpRequest, service: InferenceService) -> str:
    services.promote_canary(service)
    return _("The canary is now the current revision.")


def _withdraw(request: HttpRequest, service: InferenceService) -> str:
    services.withdraw(service, request.POST.get("role", ""))
    return _("Withdrawn.")


def _scale(request: HttpRequest, service: InferenceService) -> str:
    services.scale(
        service, min_replicas=request.POST.get("min_replicas"), max_replicas=request.POST.get("max_replicas")
    )
    return _("Scaling bounds saved.")


def _stop(request: HttpRequest, service: InferenceService) -> str:
    services.stop_service(service, _("stopped by %(user)s") % {"user": request.user.get_username()})
    return _("Stopping every replica.")


def _start(request: HttpRequest, service: InferenceService) -> str:
    services.start_service(service, request.user)
    return _("Starting.")


ACTIONS: dict[str, Callable[[HttpRequest, InferenceService], str]] = {
    "deploy": _deploy, "rollback": _rollback, "canary": _canary, "shadow": _shadow, "traffic": _traffic,
    "promote": _promote, "withdraw": _withdraw, "scale": _scale, "stop": _stop, "start": _start,
}  # fmt: skip


def action_view(name: str) -> Callable[..., HttpResponse]:
    act = ACTIONS[name]

    @project_view(CONTRIBUTE, model=InferenceService, methods=("POST",))
    def view(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
        try:
            messages.success(request, act(request, service))
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        return redirect(_detail_url(service))

    view.__name__ = f"service_{name.replace('-', '_')}"
    return view


@project_view(CONTRIBUTE, model=InferenceService, methods=("POST",))
def service_delete(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    name = service.name
    services.delete_service(service)
    messages.success(request, _("Service “%(name)s” deleted; its replicas are stopping.") % {"name": name})
    return redirect("serving:service-list", project=project.slug)


@project_view(CONTRIBUTE, model=InferenceService, methods=("POST",))
def service_rotate_key(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    """A new key, shown in this response only (never stored in the clear, not even in the session)."""
    key = services.rotate_key(service)
    messages.success(request, _("A new key was made; copy it now, it is not shown again."))
    return _render_detail(request, project, service, new_key=key)


# --- "Deploy this version", from the registry's version page -------------------------------------------------------


@project_view(CONTRIBUTE, model=ModelVersion)
def version_deploy(request: HttpRequest, project: Project, version: ModelVersion) -> HttpResponse:
    """Deploy a registered model version: to a new service, or to one of the model's services (pinned to it)."""
    targets = InferenceService.objects.filter(
        project=project, registered_model=version.registered_model
    ).select_related("model_version", "registered_model")
    errors: dict[str, list[str]] = {}
    name = (
        request.POST.get("name", "").strip()
        if request.method == "POST"
        else services.free_service_name(project, version)
    )
    detected = default_framework(version.source)  # what the version's files need
    framework = request.POST.get("framework", "").strip() if request.method == "POST" else ""
    if request.method == "POST":
        chosen = request.POST.get("service")
        target = targets.filter(pk=chosen).first() if chosen and chosen.isdigit() else None
        try:
            if chosen and target is None:
                raise ValidationError({"service": [_("Choose a service of this model.")]})
            service, problem = services.deploy_version(
                project, request.user, version, service=target, name=name, framework=framework
            )
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        else:
            model = f"{version.registered_model.name} v{version.version}"
            if problem:
                messages.warning(request, problem)
            else:
                messages.success(
                    request, _("Deploying %(model)s to %(name)s.") % {"model": model, "name": service.name}
                )
            return redirect(_detail_url(service))
    alerts = [message for key, found in errors.items() if key not in ("name", "framework") for message in found]
    context = {"project": project, "version": version, "targets": targets.order_by("name"), "name": name,
               "errors": errors, "alerts": alerts, "frameworks": Framework.choices,
               "framework": framework or detected}  # fmt: skip
    return render(request, "serving/version_deploy.html", context, status=400 if errors else 200)
