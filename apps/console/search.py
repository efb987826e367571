"""The global search box: projects, pipelines, runs, datasets, models and services by name, across the projects the
user may view (a project-limited API token: its project only). Each kind is one bounded query (`LIMIT` + 1, to say
whether there is more); nothing outside the user's projects is ever looked at. Here, in the console (the top layer),
because it names every app's objects."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline, PipelineRun
from apps.models.models import RegisteredModel
from apps.projects.permissions import projects_for
from apps.serving.models import InferenceService

MAX_QUERY = 100
PER_KIND = 8
RUN_NUMBER = re.compile(r"^(?P<name>.*?)\s*#(?P<number>\d{1,9})$")  # "iris #3" or "#3": a run by its number


@dataclass
class Hit:
    name: str
    url: str
    project: str  # the project's name ("" for a project itself)
    project_slug: str
    detail: str = ""


@dataclass
class Group:
    kind: str
    label: Any
    hits: list[Hit] = field(default_factory=list)
    more: bool = False


def _named(model: type, q: str) -> Callable[[QuerySet], QuerySet]:
    return lambda projects: (
        model.objects.filter(project__in=projects, name__icontains=q).select_related("project").order_by("name", "pk")
    )


def _runs(q: str) -> Callable[[QuerySet], QuerySet]:
    match = RUN_NUMBER.match(q)
    if match:
        query = Q(number=int(match["number"]))
        if match["name"]:
            query &= Q(pipeline_name__icontains=match["name"])
    else:
        query = Q(pipeline_name__icontains=q)
    return lambda projects: (
        PipelineRun.objects.filter(query, project__in=projects).select_related("project").order_by("-created_at", "-pk")
    )


URLS = {
    "pipelines": "jobs:pipeline-detail",
    "runs": "jobs:run-detail",
    "datasets": "datasets:dataset-detail",
    "models": "models:model-detail",
    "services": "serving:service-detail",
}


def _hit(kind: str, obj: Any) -> Hit:
    project = obj if kind == "projects" else obj.project
    slug = project.slug
    if kind == "projects":
        return Hit(obj.name, reverse("projects:overview", kwargs={"project": slug}), "", slug, obj.slug)
    name = URLS[kind]
    detail = obj.get_status_display() if kind == "runs" else ""
    return Hit(str(obj), reverse(name, kwargs={"project": slug, "pk": obj.pk}), project.name, slug, str(detail))


def kinds() -> list[tuple[str, Any]]:
    return [
        ("projects", _("Projects")),
        ("pipelines", _("Pipelines")),
        ("runs", _("Runs")),
        ("datasets", _("Datasets")),
        ("models", _("Models")),
        ("services", _("Services")),
    ]


def search(user: Any, q: str, *, project_id: int | None = None, per_kind: int = PER_KIND) -> list[Group]:
    """The groups of hits for `q` (stripped, at most MAX_QUERY characters: longer is the caller's 400), in the order
    of `kinds()`; `project_id` narrows to one project (a project-limited token)."""
    q = q.strip()
    if not q:
        return []
    projects = projects_for(user)
    if project_id is not None:
        projects = projects.filter(pk=project_id)
    visible = projects.values("pk")  # one subquery, the same in every kind's query
    queries: dict[str, Callable[[QuerySet], QuerySet]] = {
        # the user's projects themselves, filtered: no second subquery of what is already a query of projects
        "projects": lambda _visible: projects.filter(Q(name__icontains=q) | Q(slug__icontains=q)).order_by(
            "name", "pk"
        ),
        "pipelines": _named(Pipeline, q),
        "runs": _runs(q),
        "datasets": _named(Dataset, q),
        "models": _named(RegisteredModel, q),
        "services": _named(InferenceService, q),
    }
    groups = []
    for kind, label in kinds():
        found = list(queries[kind](visible)[: per_kind + 1])
        groups.append(Group(kind, label, [_hit(kind, obj) for obj in found[:per_kind]], len(found) > per_kind))
    return groups
