"""A real Celery worker of the `kubernetes` queue is SIGKILLed while its create request is in flight: the message it
held is delivered again to the next worker (the task is acknowledged late), whose apply adopts what the dead one's
request created. The workload is applied exactly once: one Job, no second create that succeeded. Where the broker
gives nothing back, the repair sweep queues the applies again, with the same result.

The worker is a prefork worker (as `make run`'s and the manifests' are), its main process and pool child killed
together. The broker is the test's Redis under a key prefix of the test's own (as the outbox tests' private
broker), with a visibility timeout of a few seconds for the worker processes (killable_worker.py) so that the
redelivery happens within the test. With `acks_late=False` this test fails: the message is gone with the worker.
No controller and no beat run: nothing but the redelivery can bring the apply back. The embedded folder broker has
no acknowledgements (a claimed message is gone), so there the repair sweep is what re-applies; the first test needs
Redis, which CI runs the suite with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from apps.outbox.models import PendingTask
from apps.runtime.models import KubeWorkload
from apps.runtime.tasks import kube_repair
from tests.conftest import database_url_of_test_db
from tests.outbox.conftest import PrivateBroker
from tests.runtime.kubernetes.conftest import fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_job, sample_service
from tests.runtime.kubernetes.test_controller_crash import workload_labels

needs_redis = pytest.mark.skipif(
    not settings.REDIS_URL, reason="needs Redis: the folder broker does not redeliver what a dead worker held"
)

VISIBILITY_TIMEOUT = 3  # seconds after its delivery that a message a dead worker held goes back to the queue
JOBS = ("batch", "jobs")


@pytest.fixture
def redis_broker() -> PrivateBroker:
    prefix = f"test-kube-{uuid.uuid4().hex[:12]}"
    options = {"global_keyprefix": f"{prefix}:celery:", "visibility_timeout": VISIBILITY_TIMEOUT}
    return PrivateBroker(settings.REDIS_URL, None, options, {"REDIS_PREFIX": prefix})


@pytest.fixture
def start_kube_worker(tmp_path, redis_broker) -> Iterator[Callable[[], subprocess.Popen]]:
    """`celery worker --queues kubernetes` as a process of its own, against the test database and the broker."""
    procs: list[subprocess.Popen] = []

    def start(broker: PrivateBroker | None = None) -> subprocess.Popen:
        broker = broker or redis_broker
        env = {
            **os.environ,
            "DATABASE_URL": database_url_of_test_db(),
            "SECRET_KEY": settings.SECRET_KEY,
            "PORTAL_VAR_DIR": str(settings.VAR_DIR),
            "PORTAL_KUBE_RETRY_BASE": "0.02",
            "KUBE_TEST_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
            **broker.worker_env,
        }
        log = Path(tmp_path / f"worker-{len(procs)}.log")
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("celery")), "-A", "tests.runtime.kubernetes.killable_worker",
             "worker", "--queues", "kubernetes", "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO",
             "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=settings.BASE_DIR, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the main process and its pool child die together
        )  # fmt: skip
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            kill(proc)


def kill(worker: subprocess.Popen) -> None:
    """SIGKILL the worker's main process and its pool's child at once: nothing of it says goodbye."""
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)


@needs_redis
def test_a_worker_killed_mid_apply_leaves_the_workload_applied_once_by_the_next(
    fake, cluster, redis_broker, start_kube_worker
):
    held = fake.faults.hold("POST", r"/jobs$")  # the first create waits in the API server until released
    with redis_broker.up():
        fresh_runtime().submit(mine(sample_job(), "task-1"))
    assert not PendingTask.objects.exists()  # the broker took the apply at the commit

    first = start_kube_worker()
    wait_for(lambda: held.hits == 1, timeout=60, message="the worker never sent the create")
    row = KubeWorkload.objects.get(uid="task-1")
    # Mid-apply: the intent is recorded, the create in flight.
    assert row.applied == [{"apiVersion": "batch/v1", "kind": "Job", "name": row.applied[0]["name"]}]
    assert not row.created
    kill(first)
    assert first.returncode == -signal.SIGKILL

    # The API server carries out the create the dead worker sent: the Job exists, and no worker knows it.
    held.release()
    wait_for(lambda: len(fake.objects(*JOBS, "team-a")) == 1, message="the held create never took effect")
    assert not KubeWorkload.objects.get(uid="task-1").created

    second = start_kube_worker()
    wait_for(lambda: KubeWorkload.objects.get(uid="task-1").created, timeout=60, message="never applied again")
    assert second.poll() is None
    (job,) = fake.objects(*JOBS, "team-a")
    assert job["metadata"]["labels"]["portal.io/workload"] == "task-1"
    # Two creates reached the server: the held one, and the redelivered apply's, answered 409 and adopted.
    creates = fake.requests_to("POST", "/jobs")
    assert len(creates) == 2
    row = KubeWorkload.objects.get(uid="task-1")
    assert (row.state, row.applied[0]["name"]) == ("pending", job["metadata"]["name"])


def test_applies_a_killed_worker_left_half_done_are_finished_by_the_repair_sweep(
    fake, cluster, listener, private_broker, start_kube_worker, run_controller, settings
):
    """With either broker, and no redelivery: the sweep queues again what should have been applied by now, and the
    next worker adopts what the dead one created — one set of objects per workload."""
    fake.sim.autopilot(outcome="hold", lines=2, delay=0.02)  # services keep running
    fake.faults.slow("POST", r"/(deployments|services|horizontalpodautoscalers)$", 0.3, times=100)
    uids = [f"svc-{i}" for i in range(4)]
    with private_broker.up():
        fresh_runtime().submit_many([mine(sample_service(), uid) for uid in uids])
    worker = start_kube_worker(private_broker)
    # Killed in the middle of applying: some objects exist whose rows do not say so yet.
    wait_for(lambda: len(fake.requests_to("POST", "/")) >= 5, timeout=60, message="the worker created nothing")
    kill(worker)
    half_done = KubeWorkload.objects.filter(created=False).exclude(applied=[]).count()
    assert half_done >= 1, "the kill came too late to test anything"

    fake.faults.clear()
    settings.PORTAL_KUBE_REPAIR_AFTER = 0  # every unapplied row is overdue
    run_controller()  # the leader, and a worker on a broker of its own: none of the messages above reach it
    unapplied = KubeWorkload.objects.filter(created=False).count()
    assert kube_repair() == unapplied  # beat's task, its body run here: queues them again
    wait_for(lambda: all(row.created for row in KubeWorkload.objects.all()), timeout=60, message="never applied")
    for group, plural in (("apps", "deployments"), ("", "services"), ("autoscaling", "horizontalpodautoscalers")):
        assert Counter(workload_labels(fake, group, plural)) == dict.fromkeys(uids, 1), plural
    wait_for(lambda: all(row_state(uid) == "running" for uid in uids), timeout=30)
