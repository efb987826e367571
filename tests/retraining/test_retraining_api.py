"""The API twins: policies created through the service (400 with field messages), decisions approved only by project
admins, rolled back by editors, read by viewers, and 404 outside the project."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditEntry
from apps.projects.models import Role
from apps.retraining import gate
from tests.conftest import user_client
from tests.factories import UserFactory, add_member
from tests.retraining.factories import champion, policy, version_with

pytestmark = pytest.mark.django_db


def test_a_policy_is_created_by_name_and_bad_input_is_a_400_by_field(world):
    rule = policy(world.project_a, world.alice)  # makes the pipeline, dataset and model
    api = user_client(world.bob)  # editor
    body = {"project": "project-a", "name": "second", "pipeline": rule.pipeline.name, "dataset": "iris",
            "registered_model": "iris-classifier", "alias": "staging", "dataset_argument": "load.dataset"}  # fmt: skip
    response = api.post("/api/v1/retrain-policies/", body, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["created_by"], response.json()["pipeline"]) == ("bob", rule.pipeline.name)

    bad = {**body, "name": "third", "dataset_argument": "nowhere.dataset", "alias": "v1",
           "arguments": {"ghost": {"x": 1}}}  # fmt: skip
    response = api.post("/api/v1/retrain-policies/", bad, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"dataset_argument", "alias", "arguments"}


def test_only_a_project_admin_approves_and_outsiders_get_404(world):
    project, alice = world.project_a, world.alice
    champion(project, alice, 0.8)
    decision = gate.decide(policy(project, alice, require_approval=True), version_with(project, alice, 0.9))
    viewer = UserFactory(username="vera")
    add_member(project, viewer, Role.VIEWER)
    url = f"/api/v1/promotion-decisions/{decision.pk}/"

    listed = user_client(viewer).get("/api/v1/promotion-decisions/?outcome=pending").json()["results"]
    assert [(d["challenger_value"], d["champion_value"], d["outcome"]) for d in listed] == [(0.9, 0.8, "pending")]
    assert user_client(world.charlie).get(url).status_code == 404
    assert user_client(world.charlie).post(url + "approve/").status_code == 404
    assert user_client(viewer).post(url + "approve/").status_code == 403
    assert user_client(world.bob).post(url + "approve/").status_code == 403  # editors may not approve
    response = user_client(alice).post(url + "approve/")
    assert response.status_code == 200
    assert (response.json()["outcome"], response.json()["previous"]) == ("approved", 1)
    assert user_client(alice).post(url + "approve/").status_code == 409
    audited = AuditEntry.objects.get(project=project, actor=alice, path=url + "approve/", status=200)
    assert (audited.action, audited.object_type) == ("approve", "models.modelalias")  # who moved which alias

    assert user_client(viewer).post(url + "rollback/").status_code == 403
    rolled = user_client(world.bob).post(url + "rollback/")
    assert rolled.status_code == 200
    assert rolled.json()["rolled_back_by"] == "bob"


def test_the_pages_show_the_decision_with_both_metrics(world, client):
    project, alice = world.project_a, world.alice
    champion(project, alice, 0.8125)
    gate.decide(policy(project, alice, require_approval=True), version_with(project, alice, 0.9375))
    client.force_login(world.bob)
    page = client.get(f"/p/{project.slug}/retraining/decisions/").content.decode()
    assert "0.9375" in page
    assert "0.8125" in page
    assert "Waiting for approval" in page
    assert "A project admin decides." in page  # bob sees no approve button
    assert client.get(f"/p/{project.slug}/retraining/").status_code == 200
    client.force_login(world.charlie)
    assert client.get(f"/p/{project.slug}/retraining/decisions/").status_code == 404
