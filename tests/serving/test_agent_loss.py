"""A service comes back after its agent is lost: real model servers under a real agent that is killed with
SIGKILL (as a supervisor's or the OOM killer's kill -9 would) while a revision rolls out. The lost replicas are an
infrastructure event: once an agent runs again the rollout is retried by itself and the revision serves. A model
that cannot load still fails its rollout with its own reason, and is not retried."""

from __future__ import annotations

import contextlib
import signal
import time
from datetime import timedelta

import psutil
import pytest
from django.utils import timezone

from apps.runtime.models import LocalWorkload
from apps.runtime.workload import AGENT_SHUT_DOWN, Phase, Status
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import create_service, deploy, rollout
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import AgentProcess
from tests.serving.factories import (  # noqa: F401 (fixtures)
    IRIS_CLASSES,
    READY_SECONDS,
    artifact_store,
    drive,
    fast_serving,
    heartbeat_agent,
    infer_body,
    iris_bytes,
    post_json,
    predictions,
    ready_replicas,
    register,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("artifact_store")]


@pytest.fixture
def agents(transactional_db, tmp_path, settings, request):
    """Start agents on demand (one after another: the second replaces a killed first); all stopped at the end."""
    request.getfixturevalue("fast_serving")
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.PORTAL_AGENT_TIMEOUT = 5  # a killed agent counts as dead after 5 s (it heartbeats every 2 s)
    settings.PORTAL_SERVING_LOST_BACKOFF = 1
    started: list[AgentProcess] = []

    def start() -> AgentProcess:
        process = AgentProcess(tmp_path, env={"PORTAL_WORK_DIR": str(settings.PORTAL_WORK_DIR)})
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def kill_agent_with_its_replicas(agent: AgentProcess, revision: Revision) -> None:
    """kill -9 of the agent and of the replica processes it supervised (the whole process tree goes down, as
    when a supervisor SIGKILLs the portal's processes)."""
    pids = []
    for replica in revision.replicas.all():
        pids += [int(pid) for pid in (LocalWorkload.objects.get(uid=replica.handle).pids or {}).values()]
    tree = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            tree += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=10)
    for process in tree:
        # A wrapper (the sandbox's network helper) may exit on its own once the agent is gone: nothing left to kill.
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)


def wait_for_process(revision: Revision) -> None:
    """Until a replica of `revision` has a running process (its model server is loading: mid-rollout)."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        handles = list(revision.replicas.values_list("handle", flat=True))
        if any(LocalWorkload.objects.filter(uid__in=handles, state="running").values_list("pids", flat=True)):
            return
        assert time.monotonic() < deadline, "no replica process started"
        time.sleep(0.05)


def lost_then_waiting(service: InferenceService, revision: Revision) -> None:
    """With the agent dead, the reconcile pass records the replica lost (after the agent's heartbeat timeout), and
    the revision keeps rolling out: not failed, a retry on its way."""
    service = drive(service, lambda s: revision.replicas.filter(status=Replica.Status.LOST).exists(), timeout=60)
    revision.refresh_from_db()
    assert revision.status == Revision.Status.ROLLING_OUT, revision.reason
    lost = revision.replicas.get(status=Replica.Status.LOST)
    assert lost.reason == "lost with its agent: agent lost"


def test_a_first_rollout_interrupted_by_a_killed_agent_serves_once_an_agent_runs_again(agents):
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    v1 = register(project, alice, iris_bytes())
    service = create_service(
        project, alice, name="iris", registered_model=v1.registered_model, model_version=1, cpu="0.5", memory="256Mi"
    )
    first = agents()
    r1 = deploy(service, alice)
    wait_for_process(r1)

    kill_agent_with_its_replicas(first, r1)
    lost_then_waiting(service, r1)
    agents()  # `make run` again: a new agent

    service = drive(service, lambda s: s.status == InferenceService.Status.READY)
    r1.refresh_from_db()
    assert (service.current_revision_id, r1.status) == (r1.pk, Revision.Status.READY)
    assert service.reason == ""
    [replica] = ready_replicas(r1)
    status, body = post_json(f"{replica.upstream}/v2/models/iris/infer", infer_body())
    assert (status, predictions(body)) == (200, IRIS_CLASSES)


def test_a_later_rollout_interrupted_by_a_killed_agent_is_retried_and_becomes_current(agents):
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    v1 = register(project, alice, iris_bytes())
    service = create_service(
        project, alice, name="iris", registered_model=v1.registered_model, model_version=1, cpu="0.5", memory="256Mi"
    )
    first = agents()
    r1 = deploy(service, alice)
    service = drive(service, lambda s: s.status == InferenceService.Status.READY)
    service.model_version = register(project, alice, iris_bytes(max_iter=800, c=0.5))
    service.save()
    r2 = deploy(service, alice)
    wait_for_process(r2)

    kill_agent_with_its_replicas(first, r2)
    lost_then_waiting(service, r2)
    agents()

    service = drive(service, lambda s: s.current_revision_id == r2.pk and s.status == InferenceService.Status.READY)
    r1.refresh_from_db()
    r2.refresh_from_db()
    assert r2.status == Revision.Status.READY
    assert r1.status == Revision.Status.RETIRED
    assert "Rollout" not in service.reason
    [replica] = ready_replicas(r2)
    status, body = post_json(f"{replica.upstream}/v2/models/iris/infer", infer_body())
    assert (status, predictions(body)) == (200, IRIS_CLASSES)

    # A model that crashes on load still fails its rollout with its own reason, and is not retried.
    service.model_version = register(project, alice, b"this is not a model")
    service.save()
    r3 = deploy(service, alice)
    service = drive(service, lambda s: Revision.objects.get(pk=r3.pk).status == Revision.Status.FAILED)
    r3.refresh_from_db()
    assert "exited with code 3" in r3.reason, r3.reason
    assert "cannot serve" in r3.reason, r3.reason
    assert r3.replicas.count() == 1
    assert service.current_revision_id == r2.pk
    assert "Rollout of r3 failed and was rolled back; r2 keeps serving" in service.reason


def test_lost_replicas_are_retried_with_backoff_a_bounded_number_of_times(world, settings):
    """The state machine alone (an agent that only heartbeats; the runtime reports each attempt lost)."""
    settings.PORTAL_SERVING_LOST_RETRIES = 2
    settings.PORTAL_SERVING_LOST_BACKOFF = 30
    heartbeat_agent()
    v1 = register(world.project_a, world.alice, iris_bytes())
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, cpu="0.5", memory="256Mi")  # fmt: skip
    r1 = deploy(service, world.alice)

    def lose_the_attempt() -> Replica:
        [replica] = r1.replicas.filter(status=Replica.Status.STARTING)
        LocalWorkload.objects.filter(uid=replica.handle).update(state="lost", reason="agent lost")
        rollout.reconcile()
        replica.refresh_from_db()
        return replica

    first = lose_the_attempt()
    service.refresh_from_db()
    assert first.status == Replica.Status.LOST
    assert r1.replicas.filter(status=Replica.Status.STARTING).count() == 0  # 30 s of backoff first
    assert service.status == InferenceService.Status.DEPLOYING
    assert "retry 1 of 2 at" in service.reason

    Replica.objects.filter(pk=first.pk).update(stopped_at=timezone.now() - timedelta(seconds=31))
    rollout.reconcile()
    assert r1.replicas.filter(status=Replica.Status.STARTING).count() == 1

    lose_the_attempt()  # the second retry waits twice as long
    Replica.objects.filter(pk=first.pk).update(stopped_at=timezone.now() - timedelta(seconds=100))
    lost = Replica.objects.filter(revision=r1, status=Replica.Status.LOST).exclude(pk=first.pk)
    lost.update(stopped_at=timezone.now() - timedelta(seconds=31))
    rollout.reconcile()
    assert r1.replicas.filter(status=Replica.Status.STARTING).count() == 0
    lost.update(stopped_at=timezone.now() - timedelta(seconds=61))
    rollout.reconcile()
    assert r1.replicas.filter(status=Replica.Status.STARTING).count() == 1

    lose_the_attempt()  # the third loss: retries used up
    r1.refresh_from_db()
    service.refresh_from_db()
    assert r1.status == Revision.Status.FAILED
    assert "lost with their agent 3 times; not retried again" in r1.reason
    assert service.status == InferenceService.Status.FAILED


def test_a_rollout_no_agent_ever_started_waits_for_one_instead_of_failing(world, settings):
    heartbeat_agent()
    v1 = register(world.project_a, world.alice, iris_bytes())
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, cpu="0.5", memory="256Mi")  # fmt: skip
    r1 = deploy(service, world.alice)
    Replica.objects.filter(revision=r1).update(started_at=timezone.now() - timedelta(seconds=181))
    Revision.objects.filter(pk=r1.pk).update(created_at=timezone.now() - timedelta(seconds=181))

    rollout.reconcile()

    r1.refresh_from_db()
    service.refresh_from_db()
    assert r1.status == Revision.Status.ROLLING_OUT
    assert service.status == InferenceService.Status.DEPLOYING
    assert "waiting for an agent to start its replicas" in service.reason


def test_a_serving_replica_stopped_by_its_agents_shutdown_comes_back_with_the_next_agent(agents):
    """SIGTERM: the agent cancels what it runs as it stops (saying so), and the service starts it again."""
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    v1 = register(project, alice, iris_bytes())
    service = create_service(
        project, alice, name="iris", registered_model=v1.registered_model, model_version=1, cpu="0.5", memory="256Mi"
    )
    first = agents()
    r1 = deploy(service, alice)
    service = drive(service, lambda s: s.status == InferenceService.Status.READY)
    [replica] = ready_replicas(r1)

    first.stop()  # SIGTERM, waited for

    replica.refresh_from_db()
    assert (replica.status, replica.reason) == (Replica.Status.LOST, "lost with its agent: the agent shut down")
    agents()
    service = drive(service, lambda s: s.status == InferenceService.Status.READY and ready_replicas(r1))
    [again] = ready_replicas(r1)
    assert again.pk != replica.pk
    status, body = post_json(f"{again.upstream}/v2/models/iris/infer", infer_body())
    assert (status, predictions(body)) == (200, IRIS_CLASSES)


def test_only_a_cancel_nobody_asked_for_counts_as_lost(world):
    heartbeat_agent()
    v1 = register(world.project_a, world.alice, iris_bytes())
    service = create_service(world.project_a, world.alice, name="iris", registered_model=v1.registered_model,
                             model_version=1, cpu="0.5", memory="256Mi")  # fmt: skip
    r1 = deploy(service, world.alice)
    [replica] = r1.replicas.all()

    rollout.record_end(replica.pk, replica.handle, Status(Phase.CANCELLED, reason="cancelled"), then_advance=False)
    replica.refresh_from_db()
    assert replica.status == Replica.Status.STOPPED
    Replica.objects.filter(pk=replica.pk).update(status=Replica.Status.STARTING)

    rollout.record_end(replica.pk, replica.handle, Status(Phase.CANCELLED, reason=AGENT_SHUT_DOWN), then_advance=False)
    replica.refresh_from_db()
    assert (replica.status, replica.reason) == (Replica.Status.LOST, "lost with its agent: the agent shut down")
