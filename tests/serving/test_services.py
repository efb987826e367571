"""The control plane without processes (an agent that only heartbeats: workloads wait, and the tests play the
readiness probe): settings checked field by field, the frozen config of a revision, the rollout state machine's
pointer moves (current, canary, shadow, promote, withdraw, rollback), stop/start/delete, keys, and following an
alias through the registry service and the MLflow API."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from apps.accounts.models import hash_token
from apps.models.models import ModelVersion
from apps.models.registry import set_alias
from apps.runtime.models import LocalWorkload
from apps.serving.models import Framework, InferenceService, Replica, Revision
from apps.serving.services import (
    create_service,
    delete_service,
    deploy,
    deploy_canary,
    deploy_shadow,
    promote_canary,
    rollback,
    rotate_key,
    scale,
    set_traffic,
    start_service,
    stop_service,
    update_service,
    withdraw,
)
from tests.factories import registered_model, tracking_run
from tests.serving.factories import (  # noqa: F401 (fixtures)
    artifact_store,
    eager_celery,
    heartbeat_agent,
    iris_bytes,
    make_ready,
    register,
)

pytestmark = pytest.mark.usefixtures("artifact_store")

MODEL = iris_bytes()


def errors_of(call) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call()
    error = caught.value
    return error.message_dict if hasattr(error, "error_dict") else {"__all__": error.messages}


@pytest.fixture
def v1(world):
    return register(world.project_a, world.alice, MODEL)


def test_it_checks_every_setting_by_field(world, v1):
    project, alice = world.project_a, world.alice
    theirs = register(world.project_b, world.charlie, MODEL, model_name="theirs")
    pending = ModelVersion.objects.create(
        registered_model=v1.registered_model, version=9, source=v1.source, status=ModelVersion.Status.PENDING
    )
    create_service(project, alice, name="taken", registered_model=v1.registered_model, model_version=1)

    cases = [
        ({"name": "Bad Name"}, "name"),
        ({"name": "taken"}, "name"),
        ({"registered_model": theirs.registered_model.name, "model_version": 1}, "registered_model"),
        ({"registered_model": theirs.registered_model, "model_version": 1}, "registered_model"),
        ({"model_version": 7}, "model_version"),
        ({"model_version": pending.version}, "model_version"),
        ({"model_version": None, "follow_alias": "production"}, "follow_alias"),  # no such alias yet
        ({"model_version": None, "follow_alias": "bad alias!"}, "follow_alias"),
        ({"model_version": None}, "model_version"),
        ({"min_replicas": 3, "max_replicas": 2}, "max_replicas"),
        ({"min_replicas": 0}, "min_replicas"),
        ({"cpu": "lots"}, "cpu"),
        ({"memory": "huge"}, "memory"),
        ({"gpu": "0.5"}, "gpu"),
        ({"env": "NOT AN ASSIGNMENT"}, "env"),
        ({"env": {"PORTAL_PROJECT": "x"}}, "env"),
        ({"framework": "custom", "registered_model": None, "model_version": None}, "command"),
        ({"command": ["python", "serve.py"]}, "command"),
        ({"scale_metric": "rps"}, "scale_metric"),
        ({"auth": "none"}, "auth"),
    ]
    for overrides, field in cases:
        values = {"name": "iris", "registered_model": v1.registered_model, "model_version": 1, **overrides}
        name = values.pop("name")
        assert field in errors_of(lambda n=name, v=values: create_service(project, alice, name=n, **v)), overrides

    project.quota.cpu_cores, project.quota.memory_bytes = 2, 2**30
    project.quota.save()
    errors = errors_of(lambda: create_service(project, alice, name="big", registered_model=v1.registered_model,
                                              model_version=1, cpu="1", memory="512Mi", min_replicas=3,
                                              max_replicas=3))  # fmt: skip
    assert errors["cpu"] == ["asks for 3 CPU cores (3 replicas of 1 CPU core); the limit is 2 (the project's quota)"]
    assert errors["memory"] == [
        "asks for 1.5 GiB of memory (3 replicas of 512 MiB of memory); the limit is 1 GiB (the project's quota)"
    ]

    custom = create_service(project, alice, name="custom", framework=Framework.CUSTOM,
                            command="{python} -m my_server --port {port}")  # fmt: skip
    assert custom.command == ["{python}", "-m", "my_server", "--port", "{port}"]


def test_cpu_takes_a_kubernetes_quantity_as_pipeline_nodes_do(world, v1):
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, cpu="500m", memory="512Mi")  # fmt: skip
    assert float(service.cpu) == 0.5

    tiny = {"registered_model": v1.registered_model, "model_version": 1, "cpu": "50m"}
    errors = errors_of(lambda: create_service(world.project_a, world.alice, name="tiny", **tiny))
    assert errors["cpu"] == ["Give a number from 0.1 to 1000."]  # the same bounds, in cores


def test_a_deploy_freezes_its_config_and_changes_need_a_new_revision(world, v1, settings, tmp_path):
    heartbeat_agent()
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, env="A=1\n# comment\nB = two", cpu="0.5", memory="512Mi",
                             min_replicas=2, max_replicas=4)  # fmt: skip
    revision = deploy(service, world.alice)

    config = revision.config
    assert config["runtime"] == "local"
    assert config["mode"] == "local"
    assert (config["registered_model"], config["model_version"], config["model_name"]) == ("iris-classifier", 1, "iris")
    assert config["model_path"].endswith("/model")  # the artifact folder itself on a local filesystem
    assert config["env"] == {"A": "1", "B": "two"}
    assert config["resources"] == {"cpu": 0.5, "memory_bytes": 512 * 2**20, "gpu": 0.0}
    assert (config["min_replicas"], config["max_replicas"]) == (2, 4)
    replicas = list(revision.replicas.order_by("index"))
    assert [r.index for r in replicas] == [0, 1]
    spec = LocalWorkload.objects.get(uid=replicas[0].handle).spec
    assert spec["kind"] == "service"
    assert spec["labels"]["serving_replica"] == str(replicas[0].pk)
    assert spec["command"][:3] == ["{python}", "-m", "apps.serving.modelserver"]
    assert spec["command"][spec["command"].index("--model") + 1] == config["model_path"]
    # Its port is chosen and declared, so that the local sandbox forwards it (the banner still says which).
    port = spec["command"][spec["command"].index("--port") + 1]
    assert int(port) > 0
    assert spec["ports"] == {"http": int(port)}
    assert spec["env"]["PORTAL_SERVICE"] == "iris"
    assert spec["env"]["A"] == "1"

    # Scaling applies at once; the environment waits for a deploy, and the revision keeps what it was given.
    service, redeploy = update_service(service, max_replicas=6)
    assert not redeploy
    service, redeploy = update_service(service, env={"A": "2"})
    assert redeploy
    revision.refresh_from_db()
    assert revision.config["env"] == {"A": "1", "B": "two"}


def test_the_pointer_moves_only_when_every_new_replica_is_ready(world, v1):
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, min_replicas=2, max_replicas=2)  # fmt: skip
    r1 = deploy(service, world.alice)
    service.refresh_from_db()
    assert (service.status, service.current_revision_id) == (InferenceService.Status.DEPLOYING, None)
    first = r1.replicas.order_by("index").first()
    Replica.objects.filter(pk=first.pk).update(upstream="http://127.0.0.1:9")
    from apps.serving.services.rollout import mark_ready

    mark_ready(first.pk)
    service.refresh_from_db()
    assert service.current_revision_id is None  # one of two is not enough
    make_ready(r1)
    service.refresh_from_db()
    assert service.current_revision_id == r1.pk
    assert service.status == InferenceService.Status.READY

    v2 = register(world.project_a, world.alice, MODEL)
    update_service(service, model_version=v2.version)
    r2 = deploy(service, world.alice)
    service.refresh_from_db()
    assert service.current_revision_id == r1.pk  # r1 serves while r2 rolls out
    assert service.status == InferenceService.Status.DEPLOYING
    assert r1.replicas.filter(status=Replica.Status.READY).count() == 2
    make_ready(r2)
    service.refresh_from_db()
    r1.refresh_from_db()
    assert service.current_revision_id == r2.pk
    assert r1.status == Revision.Status.RETIRED
    assert set(r1.replicas.values_list("status", flat=True)) == {Replica.Status.STOPPING}  # draining, then stopped

    # Rollback: a new revision with r1's version and config, rolled out like any.
    r3 = rollback(service, world.alice, 1)
    assert (r3.number, r3.model_version_id, r3.config["rollback_of"]) == (3, v1.pk, 1)
    assert "revision" in errors_of(lambda: rollback(service, world.alice, 42))
    assert "revision" in errors_of(lambda: rollback(service, world.alice, "two"))


def test_canary_and_shadow_take_their_share_once_ready_and_leave_on_promote_or_withdraw(world, v1):
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1)  # fmt: skip
    assert errors_of(lambda: deploy_canary(service, world.alice, 10))  # nothing current yet
    r1 = make_ready(deploy(service, world.alice))
    v2 = register(world.project_a, world.alice, MODEL)

    canary = deploy_canary(service, world.alice, 10, model_version=v2.version)
    assert (canary.role, canary.traffic_percent, canary.model_version_id) == ("canary", 10, v2.pk)
    service.refresh_from_db()
    assert service.canary_revision_id is None  # not before its replicas are ready
    set_traffic(service, "canary", 25)  # may move while it rolls out
    make_ready(canary)
    service.refresh_from_db()
    assert (service.canary_revision_id, service.canary_percent) == (canary.pk, 25)
    assert service.current_revision_id == r1.pk
    for percent in (0, 50, 100):
        assert set_traffic(service, "canary", percent).canary_percent == percent
    assert "percent" in errors_of(lambda: set_traffic(service, "canary", 101))

    shadow = make_ready(deploy_shadow(service, world.alice, 30, model_version=v2.version))
    service.refresh_from_db()
    assert (service.shadow_revision_id, service.shadow_percent) == (shadow.pk, 30)

    service = promote_canary(service)
    assert (service.current_revision_id, service.canary_revision_id, service.canary_percent) == (canary.pk, None, 0)
    r1.refresh_from_db()
    assert r1.status == Revision.Status.RETIRED
    assert errors_of(lambda: promote_canary(service))

    service = withdraw(service, "shadow")
    shadow.refresh_from_db()
    assert (service.shadow_revision_id, service.shadow_percent, shadow.status) == (None, 0, Revision.Status.RETIRED)
    assert errors_of(lambda: withdraw(service, "shadow"))

    # An aborted canary that was still rolling out leaves too.
    rolling = deploy_canary(service, world.alice, 5)
    withdraw(service, "canary")
    rolling.refresh_from_db()
    assert rolling.status == Revision.Status.RETIRED


def test_stop_start_scale_delete_and_the_key(world, v1):
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, max_replicas=3)  # fmt: skip
    revision = make_ready(deploy(service, world.alice))
    service = scale(service, min_replicas=2, max_replicas=3)
    revision.refresh_from_db()
    assert revision.desired_replicas == 2
    assert revision.replicas.filter(status__in=["starting", "ready"]).count() == 2
    assert "max_replicas" in errors_of(lambda: scale(service, min_replicas=3, max_replicas=1))

    service = stop_service(service)
    assert service.status == InferenceService.Status.STOPPED
    assert not revision.replicas.filter(status__in=["starting", "ready"]).exists()
    handles = list(revision.replicas.values_list("handle", flat=True))
    assert set(LocalWorkload.objects.filter(uid__in=handles).values_list("state", flat=True)) == {"cancelled"}
    service = start_service(service, world.alice)
    assert service.status == InferenceService.Status.DEPLOYING
    assert revision.replicas.filter(status="starting").count() == 2

    key = rotate_key(service)
    service.refresh_from_db()
    assert key.startswith("psk_")
    assert service.key_digest == hash_token(key)
    assert key not in json.dumps(list(InferenceService.objects.values()), default=str)
    assert rotate_key(service) != key

    live = list(revision.replicas.filter(status="starting").values_list("handle", flat=True))
    delete_service(service)
    assert not InferenceService.objects.filter(pk=service.pk).exists()
    assert set(LocalWorkload.objects.filter(uid__in=live).values_list("state", flat=True)) == {"cancelled"}


def test_a_deploy_needs_an_agent(world, v1):
    # No agent an earlier test saw is remembered: tests/conftest.py's _forget_seen_agents.
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1)  # fmt: skip
    with pytest.raises(ValidationError, match="No agent is running"):
        deploy(service, world.alice)
    assert not service.revisions.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_following_an_alias_rolls_out_each_version_it_points_at(world, v1):
    heartbeat_agent()
    model = v1.registered_model
    # A service may wait for an alias that does not exist yet (the demo's does); forms and the API refuse it.
    service = create_service(world.project_a, world.alice, name="iris", registered_model=model,
                             follow_alias="production", allow_waiting=True)  # fmt: skip
    assert deploy(service, world.alice) is None
    service.refresh_from_db()
    assert service.status == InferenceService.Status.PENDING
    assert "Waiting for a version at alias “production” of iris-classifier" in service.reason

    # The registry service, as every entry point calls it; committed at once, the signal's on_commit queues the
    # (here eager) task.
    set_alias(model, "production", 1)
    first = service.revisions.get()
    assert (first.number, first.model_version_id, first.config["alias"]) == (1, v1.pk, "production")
    make_ready(first)

    v2 = register(world.project_a, world.alice, MODEL)
    set_alias(model, "production", v2.version)
    second = service.revisions.get(number=2)
    assert second.model_version_id == v2.pk
    set_alias(model, "production", v2.version)  # set again to the same version: nothing new
    assert service.revisions.count() == 2
    set_alias(model, "staging", 1)  # another alias: not followed
    assert service.revisions.count() == 2
    set_alias(model, "production", 1)  # back to what serves while r2 rolls out: r2 is dropped, r1 serves on
    second.refresh_from_db()
    assert second.status == Revision.Status.RETIRED
    assert "moved back to version 1" in second.reason
    service.refresh_from_db()
    assert (service.current_revision_id, service.revisions.count()) == (first.pk, 2)
    set_alias(model, "production", v2.version)
    make_ready(service.revisions.get(number=3))

    # A pinned service does not follow; another project's model moving changes nothing here.
    pinned = create_service(world.project_a, world.alice, name="pinned", registered_model=model, model_version=1)
    other = registered_model(world.project_b, "iris-classifier")
    run = tracking_run(world.project_b, world.charlie)
    from apps.models.registry import create_model_version

    theirs = create_model_version(other, source=f"runs:/{run.run_uuid}/model", run=run)
    set_alias(model, "production", 1)  # r3 (v2) serves now: v1 rolls out again as r4
    set_alias(other, "production", theirs.version)
    assert not pinned.revisions.exists()
    assert service.revisions.get(number=4).model_version_id == v1.pk
    assert service.revisions.count() == 4


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery")
def test_the_mlflow_api_moving_an_alias_rolls_the_service(world, v1):
    from tests.models.conftest import api_for

    heartbeat_agent()
    set_alias(v1.registered_model, "production", 1)
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             follow_alias="production")  # fmt: skip
    make_ready(service.revisions.get())  # following an alias that points somewhere: deployed at once
    v2 = register(world.project_a, world.alice, MODEL)
    api = api_for(world.alice)
    response = api.post("registered-models/alias", {"name": "project-a/iris-classifier", "alias": "production",
                                                     "version": str(v2.version)})  # fmt: skip
    assert response.status_code == 200, response.content
    assert service.revisions.get(number=2).model_version_id == v2.pk
