"""The pages' forms go through the services: bad input is a 400 with the field's message, good input saves; a
viewer may not open the forms; approving from the page needs a project admin."""

from __future__ import annotations

import pytest

from apps.projects.models import Role
from apps.retraining import gate
from apps.retraining.models import DataMonitor, RetrainPolicy
from tests.factories import UserFactory, add_member
from tests.retraining.factories import champion, policy, version_with

pytestmark = pytest.mark.django_db


def test_the_policy_and_monitor_forms_save_through_the_services(world, client):
    rule = policy(world.project_a, world.alice)
    client.force_login(world.bob)
    url = "/p/project-a/retraining/policies/new/"
    form = {"name": "nightly", "pipeline": rule.pipeline.pk, "mode": "full", "dataset": rule.dataset.pk,
            "dataset_argument": "load.nothing.here", "arguments": "", "registered_model": rule.registered_model.pk,
            "alias": "staging", "metric": "test_accuracy", "higher_is_better": "on", "margin": "0.01",
            "drift_monitor": "", "cooldown_minutes": "30", "enabled": "on"}  # fmt: skip
    bad = client.post(url, form)
    assert bad.status_code == 400
    assert "node.argument of a node of the pipeline" in bad.content.decode()
    assert client.post(url, {**form, "arguments": "{not json"}).status_code == 400

    assert client.post(url, {**form, "dataset_argument": "load.dataset"}).status_code == 302
    saved = RetrainPolicy.objects.get(name="nightly")
    assert (saved.created_by, saved.margin, saved.cooldown_minutes) == (world.bob, 0.01, 30)

    monitor = {"name": "watch", "dataset": rule.dataset.pk, "policy": saved.pk, "min_changed_percent": "250",
               "drift_threshold": "0.2", "target_column": "", "interval_minutes": "0", "enabled": "on"}  # fmt: skip
    assert client.post("/p/project-a/retraining/monitors/new/", monitor).status_code == 400
    monitor["min_changed_percent"] = "5"
    assert client.post("/p/project-a/retraining/monitors/new/", monitor).status_code == 302
    made = DataMonitor.objects.get(name="watch")
    assert client.get(f"/p/project-a/retraining/monitors/{made.pk}/").status_code == 200

    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert client.get(url).status_code == 403
    client.force_login(world.charlie)
    assert client.get(f"/p/project-a/retraining/monitors/{made.pk}/").status_code == 404


def test_approving_from_the_page_needs_a_project_admin(world, client):
    project, alice = world.project_a, world.alice
    old = champion(project, alice, 0.7)
    decision = gate.decide(policy(project, alice, require_approval=True), version_with(project, alice, 0.9))
    url = f"/p/project-a/retraining/decisions/{decision.pk}/approve/"
    client.force_login(world.bob)
    assert client.post(url).status_code == 403
    client.force_login(alice)
    assert client.post(url).status_code == 302
    decision.refresh_from_db()
    assert (decision.outcome, decision.previous) == ("approved", old)
    page = client.get("/p/project-a/retraining/decisions/").content.decode()
    assert f"Roll back to v{old.version}" in page


def test_retrain_now_starts_a_run_shown_in_the_list(world, client):
    from tests.factories import dataset_version

    rule = policy(world.project_a, world.alice)
    dataset_version(rule.dataset)
    client.force_login(world.bob)
    response = client.post(f"/p/project-a/retraining/policies/{rule.pk}/trigger/", follow=True)
    html = response.content.decode()
    run = rule.retrainings.get().run
    assert run.created_by == world.alice  # the policy's owner, not the clicker
    assert f"/p/project-a/runs/{run.pk}/" in html
    assert "Started by hand" in html
    assert "iris@1" in html
