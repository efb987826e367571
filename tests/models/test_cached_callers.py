"""The MLflow API caches a token's user, scope and grants per process (access.TOKEN_CALLERS): a change of who may do
what in this process applies to the next call, and the cache never lets a caller reach more than it should."""

from __future__ import annotations

import http.client
import json

import pytest

from apps.accounts.models import ApiToken
from apps.accounts.services import revoke_token
from apps.audit.models import AuditEntry
from apps.models.models import Metric
from apps.projects.models import Membership, Role
from apps.projects.permissions import sync_member_permissions
from apps.projects.services import create_project
from tests.factories import add_member, make_token
from tests.models.conftest import MlflowApi, api_for, assert_error


def test_a_revoked_token_is_refused_on_the_next_call(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    assert api_a.post("runs/log-metric", {"run_id": run_id, "key": "m", "value": 1, "timestamp": 1}).status_code == 200
    revoke_token(ApiToken.objects.get(user=world.alice))
    response = api_a.post("runs/log-metric", {"run_id": run_id, "key": "m", "value": 2, "timestamp": 2})
    assert_error(response, 401, "UNAUTHENTICATED")
    assert list(Metric.objects.values_list("value", flat=True)) == [1.0]


def test_a_member_turned_viewer_can_no_longer_write(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    bob = MlflowApi(make_token(world.bob, project=world.project_a))
    assert bob.post("runs/set-tag", {"run_id": run_id, "key": "k", "value": "v"}).status_code == 200
    add_member(world.project_a, world.bob, Role.VIEWER)
    assert_error(bob.post("runs/set-tag", {"run_id": run_id, "key": "k", "value": "w"}), 403, "PERMISSION_DENIED")


def test_a_removed_member_no_longer_sees_the_run(world, api_a):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    bob = MlflowApi(make_token(world.bob, project=world.project_a))
    assert bob.get("runs/get", run_id=run_id).status_code == 200
    Membership.objects.filter(project=world.project_a, user=world.bob).delete()
    sync_member_permissions(world.project_a, world.bob, None)
    assert_error(bob.get("runs/get", run_id=run_id), 404, "RESOURCE_DOES_NOT_EXIST")


def test_a_new_project_of_the_user_is_reachable_at_once(world):
    api = api_for(world.alice)  # a token without a project: names say it
    assert api.post("experiments/create", {"name": "project-a/e"}).status_code == 200
    create_project(world.alice, slug="fresh", name="Fresh")
    assert api.post("experiments/create", {"name": "fresh/e"}).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_logging_over_http_keeps_every_point_and_writes_no_audit_entry(world, live_asgi):
    token = make_token(world.alice, project=world.project_a)
    conn = http.client.HTTPConnection(live_asgi.host, live_asgi.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(endpoint: str, body: dict) -> dict:
        conn.request("POST", f"/api/2.0/mlflow/{endpoint}", json.dumps(body), headers)
        response = conn.getresponse()
        payload = json.loads(response.read())
        assert response.status == 200, payload
        return payload

    run_id = post("runs/create", {"experiment_id": "0"})["run"]["info"]["run_id"]
    audited = AuditEntry.objects.count()
    for step in range(50):
        post("runs/log-metric", {"run_id": run_id, "key": "m", "value": step, "timestamp": 1, "step": step})
    post("runs/log-metric", {"run_id": run_id, "key": "m", "value": 49, "timestamp": 1, "step": 49})  # a retry
    assert sorted(Metric.objects.values_list("step", flat=True)) == list(range(50))
    assert AuditEntry.objects.count() == audited  # telemetry: counted, not recorded call by call
    conn.close()
