"""/api/v1/services/ and /api/v1/revisions/: members see, editors change, outsiders get 404, bad input 400 with the
field that is wrong; the actions (deploy, rollback, canary, shadow, traffic, promote, withdraw, scale, stop, start,
rotate-key, metrics) go through the same services as the pages."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts.models import hash_token
from apps.models.registry import set_alias
from apps.projects.models import Role
from apps.runtime.models import LocalWorkload
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import create_service
from tests.conftest import token_client, user_client
from tests.factories import UserFactory, add_member
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, make_ready, register  # noqa: F401

pytestmark = pytest.mark.usefixtures("artifact_store")

LIST = "/api/v1/services/"


def url(service: InferenceService, action: str = "") -> str:
    return f"{LIST}{service.pk}/{action + '/' if action else ''}"


@pytest.fixture
def version(world):
    return register(world.project_a, world.alice, iris_bytes())


@pytest.fixture
def service(world, version) -> InferenceService:
    return create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                          model_version=1, max_replicas=3)  # fmt: skip


def test_an_editor_creates_and_deploys_and_the_answer_says_how_it_goes(world, version):
    heartbeat_agent()
    body = {"project": "project-a", "name": "iris", "registered_model": "iris-classifier", "model_version": 1,
            "cpu": "0.5", "memory": "512Mi", "min_replicas": 1, "max_replicas": 2, "env": {"A": "1"},
            "deploy": True}  # fmt: skip
    response = user_client(world.bob).post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["name"], data["registered_model"], data["model_version"], data["cpu"]) == ("iris",
            "iris-classifier", 1, 0.5)  # fmt: skip
    assert data["memory_bytes"] == 512 * 2**20
    assert data["status"] == "deploying"
    assert data["url"] == "/serving/project-a/iris/"
    assert data["replicas"] == {"ready": 0, "wanted": 0}
    service = InferenceService.objects.get(pk=data["id"])
    assert service.revisions.get().created_by == world.bob


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Not A Slug"}, "name"),
        ({"registered_model": "nope"}, "registered_model"),
        ({"model_version": 4}, "model_version"),
        ({"model_version": None, "follow_alias": "production"}, "follow_alias"),
        ({"min_replicas": 3, "max_replicas": 1}, "max_replicas"),
        ({"memory": "lots"}, "memory"),
        ({"framework": "tensorflow"}, "framework"),
        ({"framework": "custom", "registered_model": None, "model_version": None}, "command"),
        ({"env": ["A=1"]}, "env"),
        ({"project": "project-b"}, "project"),  # not one of the caller's projects
    ],
)
def test_bad_settings_are_400_naming_the_field(world, version, body, field):
    base = {"project": "project-a", "name": "iris", "registered_model": "iris-classifier", "model_version": 1}
    response = user_client(world.alice).post(LIST, {**base, **body}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not InferenceService.objects.exists()


def test_members_see_outsiders_do_not_and_viewers_cannot_change(world, service):
    viewer = UserFactory(username="grace")
    add_member(world.project_a, viewer, Role.VIEWER)
    assert user_client(viewer).get(url(service)).json()["name"] == "iris"
    assert [s["name"] for s in user_client(viewer).get(LIST).json()["results"]] == ["iris"]
    for action in ("deploy", "stop", "rotate-key"):
        assert user_client(viewer).post(url(service, action)).status_code == 403
    assert user_client(viewer).patch(url(service), {"max_replicas": 2}, format="json").status_code == 403
    assert user_client(world.charlie).get(url(service)).status_code == 404
    assert user_client(world.charlie).post(url(service, "deploy")).status_code == 404
    assert user_client(world.charlie).get(LIST).json()["results"] == []
    # A token limited to another project of hers sees nothing of this one.
    add_member(world.project_b, world.alice, Role.VIEWER)
    assert token_client(world.alice, project=world.project_b).get(url(service)).status_code == 404
    assert token_client(world.alice, project=world.project_a).get(url(service)).status_code == 200


def test_the_actions(world, service, version):
    heartbeat_agent()
    client = user_client(world.bob)
    response = client.post(url(service, "deploy"))
    assert response.status_code == 201, response.content
    first = Revision.objects.get(pk=response.json()["id"])
    assert response.json()["number"] == 1
    assert response.json()["status"] == "rolling_out"
    make_ready(first)

    v2 = register(world.project_a, world.alice, iris_bytes(max_iter=300))
    response = client.post(url(service, "canary"), {"percent": 20, "model_version": v2.version}, format="json")
    assert response.status_code == 201, response.content
    canary = make_ready(Revision.objects.get(pk=response.json()["id"]))
    data = client.get(url(service)).json()
    assert (data["current_revision"], data["canary_revision"], data["canary_percent"]) == (1, 2, 20)
    assert (
        client.post(url(service, "traffic"), {"role": "canary", "percent": 50}, format="json").json()["canary_percent"]
        == 50
    )
    assert client.post(url(service, "traffic"), {"role": "current", "percent": 50}, format="json").status_code == 400
    assert client.post(url(service, "canary"), {"percent": 150}, format="json").status_code == 400
    data = client.post(url(service, "promote")).json()
    assert (data["current_revision"], data["canary_revision"]) == (canary.number, None)
    assert client.post(url(service, "promote")).status_code == 400

    shadow = client.post(url(service, "shadow"), {"percent": 100, "model_version": 1}, format="json")
    assert shadow.status_code == 201
    assert client.post(url(service, "withdraw"), {"role": "shadow"}, format="json").status_code == 200
    assert client.post(url(service, "withdraw"), {"role": "shadow"}, format="json").status_code == 400

    assert client.post(url(service, "rollback"), {"revision": 9}, format="json").status_code == 400
    assert client.post(url(service, "rollback"), {}, format="json").status_code == 400
    rolled = client.post(url(service, "rollback"), {"revision": 1}, format="json")
    assert rolled.status_code == 201
    assert rolled.json()["config"]["rollback_of"] == 1

    scaled = client.post(url(service, "scale"), {"min_replicas": 2, "max_replicas": 3}, format="json").json()
    assert (scaled["min_replicas"], scaled["max_replicas"]) == (2, 3)
    assert client.post(url(service, "scale"), {"min_replicas": 3, "max_replicas": 2}, format="json").status_code == 400

    assert client.post(url(service, "stop")).json()["status"] == "stopped"
    assert client.post(url(service, "start")).json()["status"] in ("deploying", "ready", "degraded")

    key = client.post(url(service, "rotate-key")).json()
    assert key["key"].startswith("psk_")
    assert key["key_prefix"] == key["key"][:12]
    service.refresh_from_db()
    assert service.key_digest == hash_token(key["key"])
    assert key["key"] not in client.get(url(service)).content.decode()

    metrics = client.get(url(service, "metrics"), {"minutes": 5}).json()
    assert metrics["minutes"] == 5
    assert isinstance(metrics["revisions"], dict)
    assert client.get(url(service, "metrics"), {"minutes": 0}).status_code == 400

    patched = client.patch(url(service), {"max_replicas": 4, "name": "renamed"}, format="json")
    assert patched.status_code == 200
    assert (patched.json()["max_replicas"], patched.json()["name"]) == (4, "iris")  # the name is fixed

    handles = list(Replica.objects.filter(revision__service=service, status__in=["starting", "ready"])
                   .values_list("handle", flat=True))  # fmt: skip
    assert client.delete(url(service)).status_code == 204
    assert not InferenceService.objects.filter(pk=service.pk).exists()
    assert set(LocalWorkload.objects.filter(uid__in=handles).values_list("state", flat=True)) <= {"cancelled"}


def test_a_service_waiting_for_its_alias_answers_202_then_deploys_when_it_is_set(world, version):
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                             follow_alias="production", allow_waiting=True)  # fmt: skip
    response = user_client(world.alice).post(url(service, "deploy"))
    assert response.status_code == 202
    assert response.json()["revision"] is None
    assert "Waiting for a version at alias “production”" in response.json()["detail"]
    set_alias(version.registered_model, "production", 1)
    assert user_client(world.alice).post(url(service, "deploy")).status_code == 201


def test_a_service_created_to_follow_an_existing_alias_deploys_at_once(world, version):
    heartbeat_agent()
    set_alias(version.registered_model, "production", 1)
    body = {"project": "project-a", "name": "iris", "registered_model": "iris-classifier",
            "follow_alias": "production"}  # fmt: skip  # no "deploy": following means serving what it points at
    response = user_client(world.alice).post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "deploying"
    service = InferenceService.objects.get(pk=response.json()["id"])
    revision = service.revisions.get()
    assert (revision.number, revision.model_version_id, revision.config["alias"]) == (1, version.pk, "production")
    assert revision.created_by == world.alice

    # Asking for a deploy as well rolls out one revision, not two.
    body = {**body, "name": "iris-2", "deploy": True}
    response = user_client(world.alice).post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    assert InferenceService.objects.get(pk=response.json()["id"]).revisions.count() == 1


def test_a_follower_that_cannot_deploy_now_is_created_and_says_why(world, version):
    set_alias(version.registered_model, "production", 1)  # but no agent runs
    body = {"project": "project-a", "name": "iris", "registered_model": "iris-classifier",
            "follow_alias": "production"}  # fmt: skip
    response = user_client(world.alice).post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "pending"
    assert "agent" in response.json()["reason"]


def test_a_stopped_service_wants_no_replica(world, service):
    heartbeat_agent()
    client = user_client(world.bob)
    make_ready(Revision.objects.get(pk=client.post(url(service, "deploy")).json()["id"]))
    assert client.get(url(service)).json()["replicas"] == {"ready": 1, "wanted": 1}

    stopped = client.post(url(service, "stop")).json()
    assert (stopped["status"], stopped["replicas"]) == ("stopped", {"ready": 0, "wanted": 0})
    listed = client.get(LIST, {"project": "project-a"}).json()["results"]
    assert [row["replicas"] for row in listed] == [{"ready": 0, "wanted": 0}]
    browser = Client()
    browser.force_login(world.bob)
    assert "data-replicas>0/0<" in browser.get("/p/project-a/services/").content.decode()  # the list page too

    started = client.post(url(service, "start")).json()
    assert started["replicas"]["wanted"] == 1


def test_revisions_are_read_only_records_with_their_replicas(world, service):
    heartbeat_agent()
    client = user_client(world.alice)
    revision = Revision.objects.get(pk=client.post(url(service, "deploy")).json()["id"])
    Replica.objects.filter(revision=revision).update(log_tail="modelserver: serving iris")
    listed = client.get("/api/v1/revisions/", {"service": service.pk}).json()["results"]
    assert [r["number"] for r in listed] == [1]
    assert "log_tail" not in listed[0]["replicas"][0]
    detail = client.get(f"/api/v1/revisions/{revision.pk}/").json()
    assert detail["replicas"][0]["log_tail"] == "modelserver: serving iris"
    assert "upstream" not in detail["replicas"][0]
    assert client.post("/api/v1/revisions/", {}).status_code == 405
    assert user_client(world.charlie).get(f"/api/v1/revisions/{revision.pk}/").status_code == 404
    assert reverse("api:revision-detail", kwargs={"pk": revision.pk}) == f"/api/v1/revisions/{revision.pk}/"
