"""`{% project_nav project tab %}`: a project's navigation in two rows, its groups (Overview, Build, Run, Models,
Settings) and the pages of the group the current page belongs to, so that it fits one row at 1440 px and every
sibling page stays one click away. `{% project_crumbs project tab as crumbs %}`: what the breadcrumb trail above it
needs (the section's list page, and the member's other projects for the switcher, each opened on the same section).
Here, in the console (the top layer), because it names every app's pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from apps.projects.permissions import CHANGE, has_project_perm, projects_for

register = template.Library()

# (group, label, [(tab, label, url name)]): `tab` is what a page passes to projects/_nav.html.
GROUPS: list[tuple[str, Any, list[tuple[str, Any, str]]]] = [
    ("overview", _("Overview"), [("overview", _("Overview"), "projects:overview")]),
    ("build", _("Build"), [
        ("pipelines", _("Pipelines"), "jobs:pipeline-list"),
        ("templates", _("Job templates"), "jobs:template-list"),
        ("notebooks", _("Notebooks"), "notebooks:notebook-list"),
        ("datasets", _("Datasets"), "datasets:dataset-list"),
        ("labeling", _("Labeling"), "labeling:labeling-list"),
        ("knowledge", _("Knowledge"), "knowledge:kb-list"),
    ]),
    ("run", _("Run"), [
        ("runs", _("Runs"), "jobs:run-list"),
        ("studies", _("Studies"), "hpo:study-list"),
        ("alerts", _("Alerts"), "alerts:rule-list"),
    ]),
    ("models", _("Models"), [
        ("experiments", _("Experiments"), "models:experiment-list"),
        ("models", _("Models"), "models:model-list"),
        ("services", _("Services"), "serving:service-list"),
        ("monitors", _("Monitors"), "monitoring:monitor-list"),
        ("retraining", _("Retraining"), "retraining:policy-list"),
    ]),
    ("settings", _("Settings"), [
        ("members", _("Members"), "projects:members"),
        ("secrets", _("Secrets"), "projects:secrets"),
        ("audit", _("Audit log"), "audit:project-log"),
        ("clusters", _("Clusters"), "runtime:project-clusters"),
        ("settings", _("Settings"), "projects:settings"),
    ]),
]  # fmt: skip
# Each tab's label and list page, for the breadcrumb: looked up, not found by walking GROUPS on every page.
SECTIONS: dict[str, tuple[Any, str]] = {
    name: (text, url) for _key, _label, pages in GROUPS for name, text, url in pages
}
ADMIN_ONLY = {"audit"}  # tabs only a project admin may open
SWITCHER_LIMIT = 20  # projects listed in the switcher; "All projects" leads to the rest


@dataclass
class Link:
    tab: str
    label: Any
    url: str
    active: bool


@dataclass
class Group:
    key: str
    label: Any
    url: str
    active: bool
    links: list[Link]


@register.inclusion_tag("projects/partials/project_nav.html", takes_context=True)
def project_nav(context: template.Context, project: Any, tab: str) -> dict[str, Any]:
    user = context["request"].user
    admin = has_project_perm(user, project, CHANGE)
    groups = []
    for key, label, pages in GROUPS:
        links = [
            Link(name, text, reverse(url, kwargs={"project": project.slug}), name == tab)
            for name, text, url in pages
            if admin or name not in ADMIN_ONLY
        ]
        groups.append(Group(key, label, links[0].url, any(link.active for link in links), links))
    current = next((group for group in groups if group.active), None)
    return {"groups": groups, "current": current, "project": project}


@dataclass
class Crumbs:
    section: Link | None  # the section's list page (None where the tab is no section of the navigation)
    others: list[tuple[Any, str]]  # (project name, URL of the same section in it)
    more: bool  # the member has more projects than the switcher lists


@register.simple_tag(takes_context=True)
def project_crumbs(context: template.Context, project: Any, tab: str) -> Crumbs:
    request = context["request"]
    found = SECTIONS.get(tab)
    url_name = found[1] if found and tab not in ADMIN_ONLY else "projects:overview"
    section = None
    if found:
        url = reverse(found[1], kwargs={"project": project.slug})
        section = Link(tab, found[0], url, request.path == url)
    others = list(
        projects_for(request.user)
        .exclude(pk=project.pk)
        .order_by("name")
        .values_list("name", "slug")[: SWITCHER_LIMIT + 1]
    )
    links = [(name, reverse(url_name, kwargs={"project": slug})) for name, slug in others[:SWITCHER_LIMIT]]
    return Crumbs(section, links, len(others) > SWITCHER_LIMIT)
