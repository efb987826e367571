"""Real model servers through the real agent: a deploy's replicas get ready and answer OIP v2 directly; a new
version rolls with no gap (the old replica serves until the new one is ready, then drains and stops); a broken
version is rolled back automatically with the model server's own reason; a replica that dies is replaced."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from apps.runtime.models import LocalWorkload
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import create_service, deploy, rollback
from tests.factories import ProjectFactory, UserFactory
from tests.serving.factories import (  # noqa: F401 (fixtures)
    IRIS_CLASSES,
    artifact_store,
    drive,
    fast_serving,
    get_json,
    infer_body,
    iris_bytes,
    post_json,
    predictions,
    ready_replicas,
    register,
    svc_agent,
)

pytestmark = pytest.mark.django_db(transaction=True)


class Caller(threading.Thread):
    """Sends inference requests non-stop to the replicas the routing table lists (the router's view: READY
    replicas of the current revision, refreshed by the test's reconcile loop), and counts what failed."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.table: list[str] = []
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            table = list(self.table)
            if not table:
                self.failures.append("no ready replica in the table")
                time.sleep(0.05)
                continue
            upstream = table[n % len(table)]
            n += 1
            try:
                status, body = post_json(f"{upstream}/v2/models/iris/infer", infer_body(), timeout=10)
            except OSError as exc:
                self.failures.append(f"{upstream}: {exc}")
                continue
            if status == 200 and predictions(body) == IRIS_CLASSES:
                self.ok += 1
            else:
                self.failures.append(f"{upstream}: {status} {body}")


def routing_table(service: InferenceService) -> list[str]:
    service.refresh_from_db()
    return [r.upstream for r in ready_replicas(service.current_revision)] if service.current_revision else []


@pytest.mark.usefixtures("svc_agent")
def test_deploy_roll_a_new_version_without_a_gap_and_roll_back_a_broken_one():
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    v1 = register(project, alice, iris_bytes(max_iter=500))
    service = create_service(
        project, alice, name="iris", registered_model=v1.registered_model, model_version=1, cpu="0.5", memory="256Mi"
    )

    # Deploy: the replica starts, says where it listens, answers its readiness probe; then the service serves.
    r1 = deploy(service, alice)
    assert (r1.number, r1.status, r1.config["model_version"]) == (1, Revision.Status.ROLLING_OUT, 1)
    assert r1.config["model_path"].endswith("/model")
    assert r1.config["model_name"] == "iris"
    service = drive(service, lambda s: s.status == InferenceService.Status.READY)
    assert service.current_revision_id == r1.pk
    [replica] = ready_replicas(r1)
    assert replica.upstream.startswith("http://127.0.0.1:")
    status, body = post_json(f"{replica.upstream}/v2/models/iris/infer", infer_body())
    assert status == 200, body
    assert predictions(body) == IRIS_CLASSES
    status, meta = get_json(f"{replica.upstream}/v2/models/iris")
    assert status == 200
    assert meta["name"] == "iris"
    assert meta["inputs"]
    deadline = time.monotonic() + 10  # the log tail and the agent's CPU sample are stored once a second
    while "modelserver: serving iris" not in (stored := Replica.objects.get(pk=replica.pk)).log_tail or (
        stored.cpu_percent is None
    ):
        assert time.monotonic() < deadline, "the banner or a CPU sample never reached the replica's row"
        time.sleep(0.1)

    # A new version rolls while requests flow: the old replica serves until the new one is ready.
    v2 = register(project, alice, iris_bytes(max_iter=800, c=0.5))
    service.model_version = v2
    service.save()
    caller = Caller()
    caller.table = routing_table(service)
    caller.start()
    old_pid = LocalWorkload.objects.get(uid=replica.handle).pids["0"]
    seen_both = []

    def watch() -> None:
        caller.table = routing_table(service)
        old = Replica.objects.get(pk=replica.pk)
        new_ready = Replica.objects.filter(revision__number=2, revision__service=service, status="ready").exists()
        if not new_ready:  # until the new replica is ready, the old one is in the table and alive
            assert old.status == Replica.Status.READY
            assert psutil.pid_exists(int(old_pid))
        seen_both.append((old.status, new_ready))

    r2 = deploy(service, alice)
    assert r2.number == 2
    service = drive(
        service,
        lambda s: (
            s.current_revision_id == r2.pk and Replica.objects.get(pk=replica.pk).status == Replica.Status.STOPPED
        ),
        on_pass=watch,
    )
    time.sleep(0.5)
    caller.stop.set()
    caller.join(timeout=15)
    assert caller.failures == [], caller.failures[:5]
    assert caller.ok > 0
    assert any(new_ready for _s, new_ready in seen_both)
    r1.refresh_from_db()
    assert r1.status == Revision.Status.RETIRED
    assert "replaced by r2" in r1.reason
    assert not psutil.pid_exists(int(old_pid)) or psutil.Process(int(old_pid)).status() == psutil.STATUS_ZOMBIE
    assert service.status == InferenceService.Status.READY

    # A broken version (a file that is not a model): its replica exits, the rollout is rolled back, r2 serves on.
    v3 = register(project, alice, b"this is not a model")
    service.model_version = v3
    service.save()
    r3 = deploy(service, alice)
    service = drive(service, lambda s: Revision.objects.get(pk=r3.pk).status == Revision.Status.FAILED)
    r3.refresh_from_db()
    assert "exited with code 3" in r3.reason, r3.reason
    assert "cannot serve" in r3.reason, r3.reason
    assert service.current_revision_id == r2.pk
    assert service.status == InferenceService.Status.READY
    assert "Rollout of r3 failed and was rolled back; r2 keeps serving" in service.reason
    [serving] = ready_replicas(r2)
    status, body = post_json(f"{serving.upstream}/v2/models/iris/infer", infer_body())
    assert status == 200
    assert predictions(body) == IRIS_CLASSES

    # A replica of the serving revision that dies is replaced (level-triggered: the reconcile pass sees it).
    pid = int(LocalWorkload.objects.get(uid=serving.handle).pids["0"])
    os.kill(pid, signal.SIGKILL)
    service = drive(
        service,
        lambda s: Replica.objects.filter(pk=serving.pk, status="failed").exists() and len(ready_replicas(r2)) == 1,
    )
    dead = Replica.objects.get(pk=serving.pk)
    assert "killed by signal 9" in dead.reason
    assert ready_replicas(r2)[0].index == 1

    # Rollback to r1: a new revision with r1's model version and config.
    r4 = rollback(service, alice, 1)
    assert (r4.number, r4.model_version_id, r4.config["rollback_of"]) == (4, v1.pk, 1)
    service = drive(service, lambda s: s.current_revision_id == r4.pk)
    assert service.status == InferenceService.Status.READY
