"""Pages of the model registry: models, one model (versions, aliases), one version (lineage, model card)."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Max, Prefetch, prefetch_related_objects
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.models import explanation, optimisation, registry, uses
from apps.models.errors import TrackingError
from apps.models.filters import RegisteredModelFilterSet
from apps.models.forms import AliasForm, ModelCardForm
from apps.models.models import ModelAlias, ModelVersion, RegisteredModel
from apps.models.views.common import decorate_run, ms_to_datetime
from apps.models.views.markdown import render_markdown
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.listing import listing, paged


@project_view(VIEW, methods=("GET",))
def model_list(request: HttpRequest, project: Project) -> HttpResponse:
    models = (
        RegisteredModel.objects.filter(project=project)
        .annotate(latest=Max("versions__version"), version_count=Count("versions", distinct=True))
        .prefetch_related(Prefetch("aliases", queryset=ModelAlias.objects.select_related("model_version")))
        .order_by("name", "pk")
    )
    found = listing(request, RegisteredModelFilterSet, models)
    for model in found.page.object_list:
        model.updated = ms_to_datetime(model.last_updated_timestamp)  # type: ignore[attr-defined]
    context = {"project": project, "listing": found, "tab": "models"}
    return render(request, "models/model_list.html", context, status=found.status)


def _model_context(request: HttpRequest, project: Project, model: RegisteredModel, alias_form: AliasForm) -> dict:
    # One page of versions, newest first: a model registered thousands of times costs what one with 25 does.
    versions_page = paged(
        request, model.versions.select_related("run__experiment").prefetch_related("aliases").order_by("-version")
    )
    versions = list(versions_page.page.object_list)
    for version in versions:
        version.created = ms_to_datetime(version.creation_timestamp)  # type: ignore[attr-defined]
    aliases = list(model.aliases.select_related("model_version").order_by("alias"))
    followers = uses.alias_followers(model)
    for alias in aliases:
        alias.followers = ", ".join(use.name for use in followers.get(alias.alias, []))  # type: ignore[attr-defined]
    return {
        "project": project,
        "model": model,
        "versions": versions,
        "versions_page": versions_page,
        "aliases": aliases,
        "alias_form": alias_form,
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
        "tab": "models",
    }


def _version_numbers(model: RegisteredModel) -> list[int]:
    return list(model.versions.order_by("-version").values_list("version", flat=True))


@project_view(VIEW, model=RegisteredModel, methods=("GET",))
def model_detail(request: HttpRequest, project: Project, model: RegisteredModel) -> HttpResponse:
    form = AliasForm(versions=_version_numbers(model))
    return render(request, "models/model_detail.html", _model_context(request, project, model, form))


@project_view(CONTRIBUTE, model=RegisteredModel, methods=("POST",))
def model_alias(request: HttpRequest, project: Project, model: RegisteredModel) -> HttpResponse:
    """Set (create or move) or delete an alias of the model."""
    form = AliasForm(request.POST, versions=_version_numbers(model))
    if form.is_valid():
        alias = form.cleaned_data["alias"]
        try:
            if form.cleaned_data["action"] == "delete":
                registry.delete_alias(model, alias)
                messages.success(request, _("Alias “%(alias)s” deleted.") % {"alias": alias})
            else:
                version = form.cleaned_data["version"]
                registry.set_alias(model, alias, version)
                messages.success(
                    request, _("Alias “%(alias)s” now points at version %(v)s.") % {"alias": alias, "v": version}
                )
        except TrackingError as error:
            form.add_error(None, error.message)
        else:
            return redirect("models:model-detail", project=project.slug, pk=model.pk)
    return render(request, "models/model_detail.html", _model_context(request, project, model, form), status=400)


def _version_context(request: HttpRequest, project: Project, version: ModelVersion, form: ModelCardForm) -> dict:
    run = version.run
    if run is not None:
        decorate_run(run)
    version.created = ms_to_datetime(version.creation_timestamp)  # type: ignore[attr-defined]
    version.updated = ms_to_datetime(version.last_updated_timestamp)  # type: ignore[attr-defined]
    card = version.model_card or version.default_model_card()
    prefetch_related_objects([version], "tags")  # the optimisation's source and variant, the explanation's run: tags
    explained = explanation.explanation_of(version)
    optimised_from = optimisation.source_version(version)
    # An optimised (ONNX) version computes what its source did: without an explanation of its own, its page shows the
    # source's, saying so (the explain template takes scikit-learn models, not ONNX ones).
    explained_from = None
    if explained is None and optimised_from is not None:
        explained = explanation.explanation_of(optimised_from)
        explained_from = optimised_from if explained is not None else None
    return {
        "project": project,
        "model": version.registered_model,
        "version": version,
        "run": run,
        "aliases": list(version.aliases.order_by("alias")),
        "uses": uses.uses_of(version),
        "optimised_from": optimised_from,
        "optimised_as": optimisation.optimised_versions(version),
        "optimisation": optimisation.optimisation_of(version),
        "explanation": explained,
        "explained_from": explained_from,
        "explanation_chart": explained.chart() if explained else None,
        "card_html": render_markdown(card),
        "form": form,
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
        "tab": "models",
    }


@project_view(VIEW, model=ModelVersion, methods=("GET",))
def version_detail(request: HttpRequest, project: Project, version: ModelVersion) -> HttpResponse:
    form = ModelCardForm(initial={"model_card": version.model_card or version.default_model_card()})
    return render(request, "models/version_detail.html", _version_context(request, project, version, form))


@project_view(CONTRIBUTE, model=ModelVersion, methods=("POST",))
def version_card(request: HttpRequest, project: Project, version: ModelVersion) -> HttpResponse:
    """Save the Markdown model card of a version."""
    form = ModelCardForm(request.POST)
    if form.is_valid():
        registry.update_model_version(version, model_card=form.cleaned_data["model_card"])
        messages.success(request, _("Model card saved."))
        return redirect("models:version-detail", project=project.slug, pk=version.pk)
    return render(request, "models/version_detail.html", _version_context(request, project, version, form), status=400)


@project_view(VIEW, model=ModelVersion, methods=("POST",))
def version_card_preview(request: HttpRequest, project: Project, version: ModelVersion) -> HttpResponse:
    """The card as it would render (htmx, from the editor); saves nothing."""
    html = render_markdown(request.POST.get("model_card", "")[:100_000])
    return render(request, "models/partials/card.html", {"card_html": html})
