"""Every model has an admin (docs/apps.md): registered, or shown as an inline of its parent's page, or named below
with the reason it has none. Tenant-owned admins show staff only their projects' rows (TenantAdminMixin), and every
registered admin's pages open for a superuser.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from apps.projects.admin import TenantAdminMixin
from apps.projects.models import Role
from tests.access import PROJECT_OBJECT_MAKERS
from tests.factories import UserFactory, add_member

# Rows no person should look at or edit in the admin, each with its reason.
NO_ADMIN = {
    "projects.ProjectUserObjectPermission": "guardian's grants: written only by sync_member_permissions from roles",
    "projects.ProjectGroupObjectPermission": "guardian's grants: written only by sync_member_permissions from roles",
    "runtime.DispatchLock": "one row the dispatcher locks; it holds no data",
    "jobs.LogLine": "log storage: read on the run page (search, live follow), millions of rows",
    "jobs.LogChunk": "the log search index of LogLine",
    "jobs.ResourceSample": "per-second usage samples, charted on the run page",
    "datasets.VersionFile": "a version's files (thousands, maybe), listed on the version page",
    "models.Metric": "a run's full metric history, charted on the run page (its latest values are a Run inline)",
    "models.ExperimentKey": "derived by database triggers from the runs' metrics, params and tags (the column chooser)",
    "jobs.RunSlot": "the overview's roll-up of runs by quarter hour and status, derived by triggers and compaction",
    "jobs.TaskUsageSlot": "the overview's roll-up of ended tasks' usage by quarter hour, derived likewise",
    "jobs.RunSlotDelta": "appended by database triggers, folded into RunSlot by the compaction",
    "jobs.TaskUsageSlotDelta": "appended by database triggers, folded into TaskUsageSlot by the compaction",
    "serving.RevisionTraffic": "per-minute request counters, charted on the service page",
    "serving.ConcurrencySample": "autoscaler samples, read by the autoscaler only",
}


def portal_models() -> list:
    return [m for m in apps.get_models() if m.__module__.startswith("apps.")]


def inline_models() -> set:
    return {inline.model for model_admin in admin.site._registry.values() for inline in model_admin.inlines}


def test_every_model_has_an_admin_or_a_reason():
    shown = set(admin.site._registry) | inline_models()
    missing = [m._meta.label for m in portal_models() if m not in shown and m._meta.label not in NO_ADMIN]
    assert missing == [], "register an admin (or an inline), or say in NO_ADMIN why there is none"


def test_the_reasons_name_existing_models_without_an_admin():
    labels = {m._meta.label: m for m in portal_models()}
    assert set(NO_ADMIN) <= set(labels)
    assert not [label for label in NO_ADMIN if labels[label] in admin.site._registry]


TENANT_MODELS = [
    model
    for model in PROJECT_OBJECT_MAKERS
    if isinstance(admin.site._registry.get(model), TenantAdminMixin) and model._meta.app_label != "projects"
]


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change_page(obj) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def test_the_tenant_admins_were_found():
    names = {m._meta.label for m in TENANT_MODELS}
    assert {"jobs.PipelineRun", "jobs.TaskRun", "jobs.Schedule", "datasets.Dataset", "datasets.DatasetVersion"} <= names


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_staff_see_only_their_projects_rows(world, model):
    """A staff member who may view the model, and is a viewer of project B: A's rows are neither listed nor open."""
    ours = PROJECT_OBJECT_MAKERS[model](world.project_a, world.alice)
    theirs = PROJECT_OBJECT_MAKERS[model](world.project_b, world.charlie)
    staff = UserFactory(username="sam", is_staff=True)
    staff.user_permissions.add(
        Permission.objects.get(content_type__app_label=model._meta.app_label, codename=f"view_{model._meta.model_name}")
    )
    add_member(world.project_b, staff, Role.VIEWER)
    client = Client()
    client.force_login(staff)

    listed = client.get(changelist(model))

    assert listed.status_code == 200
    rows = set(listed.context["cl"].result_list)
    assert theirs in rows
    assert ours not in rows
    assert client.get(change_page(ours)).status_code == 404
    assert client.get(change_page(theirs)).status_code == 200


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_a_superuser_opens_the_list_and_a_change_page(world, model):
    obj = PROJECT_OBJECT_MAKERS[model](world.project_a, world.alice)
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    assert client.get(changelist(model)).status_code == 200
    page = client.get(change_page(obj))
    assert page.status_code == 200
    assert str(obj) in page.content.decode() or model._meta.verbose_name in page.content.decode().lower()


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda m: m._meta.label)
def test_every_changelist_opens_for_a_superuser(db, model):
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    assert client.get(changelist(model)).status_code == 200
