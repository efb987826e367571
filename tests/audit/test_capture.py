"""One audit entry per successful mutating request, from pages, the API, the admin and the MLflow API."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from apps.audit.models import AuditEntry
from apps.projects.models import Membership, Project, ProjectSecret
from tests.conftest import user_client
from tests.factories import make_token


def only_entry() -> AuditEntry:
    entries = list(AuditEntry.objects.all())
    assert len(entries) == 1, [str(e) for e in entries]
    return entries[0]


def test_a_page_update_records_the_changed_fields_only(world, client):
    client.force_login(world.alice)
    url = reverse("projects:settings", kwargs={"project": "project-a"})
    response = client.post(url, {"name": "Project Alpha", "description": "", "runtime": ""}, REMOTE_ADDR="10.1.2.3")
    assert response.status_code == 302
    entry = only_entry()
    assert (entry.action, entry.object_type, entry.object_id) == ("update", "projects.project", str(world.project_a.pk))
    assert entry.changes == {"name": ["Project A", "Project Alpha"]}
    assert entry.actor == world.alice
    assert entry.actor_repr == "alice"
    assert entry.project == world.project_a
    assert entry.project_repr == "project-a"
    assert (entry.ip, entry.method, entry.path, entry.status) == ("10.1.2.3", "POST", url, 302)


def test_a_failed_request_writes_nothing(world, client):
    client.force_login(world.alice)
    url = reverse("projects:settings", kwargs={"project": "project-a"})
    assert client.post(url, {"name": "", "runtime": ""}).status_code == 400
    client.force_login(world.charlie)
    assert client.post(url, {"name": "Mine now", "runtime": ""}).status_code == 404
    assert not AuditEntry.objects.exists()


def test_reads_write_nothing(world, client):
    client.force_login(world.alice)
    assert client.get(reverse("projects:settings", kwargs={"project": "project-a"})).status_code == 200
    assert user_client(world.alice).get("/api/v1/projects/").status_code == 200
    assert not AuditEntry.objects.exists()


def test_an_api_create_records_the_new_object_and_the_token(world):
    raw = make_token(world.alice, name="ci")
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {raw}", HTTP_USER_AGENT="pytest-agent")
    response = api.post("/api/v1/projects/", {"slug": "new-one", "name": "New one"}, format="json")
    assert response.status_code == 201, response.content
    entry = only_entry()
    project = Project.objects.get(slug="new-one")
    assert (entry.action, entry.object_type, entry.object_id) == ("create", "projects.project", str(project.pk))
    assert entry.changes["name"] == [None, "New one"]
    assert entry.changes["slug"] == [None, "new-one"]
    assert entry.token.name == "ci"
    assert entry.actor == world.alice
    assert entry.project == project
    assert entry.user_agent == "pytest-agent"


def test_a_cascading_delete_names_the_deleted_object_not_its_children(world):
    member = Membership.objects.get(project=world.project_a, user=world.bob)
    response = user_client(world.alice).delete(f"/api/v1/memberships/{member.pk}/")
    assert response.status_code == 204, response.content
    entry = only_entry()
    assert (entry.action, entry.object_type, entry.object_id) == ("delete", "projects.membership", str(member.pk))
    assert entry.project == world.project_a

    response = user_client(world.charlie).delete("/api/v1/projects/project-b/")
    assert response.status_code == 204, response.content
    entry = AuditEntry.objects.first()
    assert (entry.action, entry.object_type, entry.object_repr) == ("delete", "projects.project", "Project B")
    assert entry.project is None
    assert entry.project_repr == ""


def test_secret_values_are_masked(world, client):
    client.force_login(world.alice)
    response = client.post(
        reverse("projects:secret-create", kwargs={"project": "project-a"}),
        {"name": "DB_PASSWORD", "value": "hunter2-very-secret", "description": "db"},
    )
    assert response.status_code in (200, 302), response.content
    entry = only_entry()
    assert entry.object_type == "projects.projectsecret"
    assert entry.changes["value"] == [None, "***"]
    assert "hunter2" not in json.dumps(entry.changes)
    secret = ProjectSecret.objects.get(name="DB_PASSWORD")
    client.post(
        reverse("projects:secret-replace", kwargs={"project": "project-a", "pk": secret.pk}), {"value": "other-pass"}
    )
    assert AuditEntry.objects.first().changes.get("value") == ["***", "***"]


def test_token_creation_and_revocation_are_recorded(world, client):
    client.force_login(world.alice)
    response = client.post(reverse("accounts:tokens"), {"name": "laptop", "scope": "write"})
    assert response.status_code == 200
    assert b"mlp_" in response.content
    created = only_entry()
    assert (created.action, created.object_type, created.object_repr) == (
        "create",
        "accounts.apitoken",
        created.object_repr,
    )
    assert "laptop" in created.object_repr
    assert created.changes["digest"] == [None, "***"]
    token_id = created.object_id
    assert client.post(reverse("accounts:token-revoke", kwargs={"pk": token_id})).status_code == 302
    revoked = AuditEntry.objects.first()
    assert (revoked.action, revoked.object_id) == ("revoke", token_id)


def test_login_and_logout_are_recorded_and_a_failed_login_is_not(world, client, password):
    login = reverse("accounts:login")
    assert client.post(login, {"username": "alice", "password": "wrong"}).status_code in (200, 400)
    assert not AuditEntry.objects.exists()
    assert client.post(login, {"username": "alice", "password": password}).status_code == 302
    entry = only_entry()
    assert (entry.action, entry.actor, entry.object_type) == ("login", world.alice, "accounts.user")
    assert client.post(reverse("accounts:logout")).status_code == 302
    entry = AuditEntry.objects.first()
    assert (entry.action, entry.actor) == ("logout", world.alice)
    assert AuditEntry.objects.count() == 2


def test_an_admin_delete_is_recorded_once(world, client):
    world.alice.is_staff = world.alice.is_superuser = True
    world.alice.save()
    client.force_login(world.alice)
    url = reverse("admin:projects_project_delete", args=[world.project_b.pk])
    assert client.get(url).status_code == 200
    assert not AuditEntry.objects.exists()
    assert client.post(url, {"post": "yes"}).status_code == 302
    entry = only_entry()
    assert (entry.action, entry.object_type, entry.object_repr) == ("delete", "projects.project", "Project B")
    assert entry.actor == world.alice
    assert entry.path == url
    assert not Project.objects.filter(slug="project-b").exists()


def test_the_mlflow_api_records_writes_and_not_searches(world):
    from tests.models.conftest import MlflowApi

    api = MlflowApi(make_token(world.alice, project=world.project_a))
    response = api.post("experiments/create", {"name": "exp-audit"})
    assert response.status_code == 200, response.content
    entry = only_entry()
    assert (entry.action, entry.object_type) == ("create", "models.experiment")
    assert entry.actor == world.alice
    assert entry.token is not None
    assert entry.project == world.project_a
    experiment_id = response.json()["experiment_id"]
    assert api.post("experiments/search", {"max_results": 10}).status_code == 200
    assert api.post("runs/search", {"experiment_ids": [experiment_id]}).status_code == 200
    assert AuditEntry.objects.count() == 1
    run = api.post("runs/create", {"experiment_id": experiment_id}).json()["run"]["info"]
    assert AuditEntry.objects.count() == 2
    assert api.post("runs/delete", {"run_id": run["run_id"]}).status_code == 200
    assert AuditEntry.objects.count() == 3
    delete_entry = AuditEntry.objects.first()
    assert delete_entry.project == world.project_a
    assert delete_entry.actor == world.alice
    assert (delete_entry.action, delete_entry.object_type, delete_entry.changes["lifecycle_stage"]) == (
        "update",
        "models.run",
        ["active", "deleted"],
    )
    assert api.post("runs/delete", {"run_id": "nope"}).status_code >= 400
    assert AuditEntry.objects.count() == 3  # metric logging is not audited: tests/audit/test_mlflow_telemetry.py


@pytest.mark.parametrize("method", ["put", "patch", "post"])
def test_entries_cannot_be_changed_or_deleted_through_the_api(world, method):
    world.alice.is_staff = True
    world.alice.save()
    client = user_client(world.alice)
    client.post("/api/v1/projects/", {"slug": "x1", "name": "X1"}, format="json")
    entry = AuditEntry.objects.get()
    assert (
        getattr(client, method)(f"/api/v1/audit/{entry.pk}/", {"action": "nothing"}, format="json").status_code == 405
    )
    assert client.delete(f"/api/v1/audit/{entry.pk}/").status_code == 405
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()
