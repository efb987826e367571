"""The fake API server, a Cluster row pointing at it, a recording listener, and a controller and a Celery worker for
the `kubernetes` queue in threads."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connection
from kombu.transport import memory

from apps.runtime import hooks
from apps.runtime.kubernetes.client import forget_clients
from apps.runtime.kubernetes.controller import Controller, Timing
from apps.runtime.kubernetes.runtime import KubernetesRuntime
from apps.runtime.models import Cluster, KubeWorkload, Operator
from apps.runtime.secretenv import Secrets
from apps.runtime.workload import Phase, Status, Workload
from portal.celery import app
from tests.outbox.conftest import celery_broker, private_broker  # noqa: F401 (a fixture, for the tests here)
from tests.runtime.kubernetes.fakeapi import FakeKube

LABEL = "kube_test"  # workloads carrying this label report to the recording listener

FAST = Timing(tick=0.05, heartbeat=0.2, resync=30, pull_grace=0, log_drain=5, log_idle=30, events=0.2)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    forget_clients()
    with FakeKube() as server:
        yield server
    forget_clients()


@pytest.fixture
def cluster(fake: FakeKube, transactional_db, settings) -> Cluster:
    settings.PORTAL_KUBE_RETRY_BASE = 0.02  # the client's backoff, short for tests (its growth is tested)
    settings.PORTAL_KUBE_TASK_RETRY_BASE = 0.1  # and the tasks'
    return Cluster.objects.create(
        name="fake",
        kubeconfig=fake.kubeconfig(),
        default_namespace="team-a",
        operators=list(Operator.values),
    )


class RecordingSink:
    def __init__(self, listener: RecordingListener, uid: str) -> None:
        self.listener, self.uid = listener, uid
        self.closed = False

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        assert not self.closed, "lines after the sink was closed"
        with self.listener.lock:
            self.listener.lines[self.uid][replica].extend(texts)

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None:
        pass

    def close(self) -> None:
        with self.listener.lock:
            self.closed = True
            self.listener.closed.append(self.uid)


@dataclass
class RecordingListener(hooks.Listener):
    """Remembers every line and every change, in the order they came."""

    lines: dict[str, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    changes: list[tuple[str, Phase, Status | None]] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    lines_at_change: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sink(self, workload: Workload, secrets: Secrets) -> RecordingSink:
        return RecordingSink(self, workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        with self.lock:
            self.changes.append((workload.uid, phase, status))
            # How many lines had come when the change came: an end must come after the last line.
            self.lines_at_change.append(sum(map(len, self.lines[workload.uid].values())))

    def phases(self, uid: str) -> list[Phase]:
        with self.lock:
            return [phase for u, phase, _status in self.changes if u == uid]

    def wait_phases(self, uid: str, expected: list[Phase], timeout: float = 30) -> None:
        """The changes of `uid` come to be exactly `expected`. The controller records a change in the database, then
        hands the notice to its notifier thread: a test that saw the row change must still wait for the notice."""
        deadline = time.monotonic() + timeout
        while (seen := self.phases(uid)) != expected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen == expected


@pytest.fixture
def listener() -> Iterator[RecordingListener]:
    recorder = RecordingListener()
    hooks.register(LABEL, recorder)
    yield recorder
    hooks._listeners.pop(LABEL, None)


class ControllerThread:
    """A controller running in a thread of the test process (its own database connection)."""

    def __init__(self, timing: Timing = FAST) -> None:
        self.timing = timing
        self.controller: Controller | None = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> ControllerThread:
        ready = threading.Event()

        def run() -> None:
            try:
                self.controller = Controller(self.timing)
                ready.set()
                self.controller.run_forever()
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
                ready.set()
            finally:
                connection.close()

        self.thread = threading.Thread(target=run, name="controller", daemon=True)
        self.thread.start()
        ready.wait(10)
        assert self.error is None, self.error
        return self

    def stop(self) -> None:
        if self.controller is not None and self.thread is not None and self.thread.is_alive():
            self.controller.stopping.set()
            self.controller.wake()
            self.thread.join(30)
        assert self.error is None, self.error

    def crash(self) -> None:
        """Stop the loop as a SIGKILL would (nothing recorded on the way out)."""
        assert self.controller is not None
        assert self.thread is not None
        self.controller.crash()
        self.thread.join(30)


class KubeWorker:
    """A Celery worker for the `kubernetes` queue in a thread of the test process, on an in-memory broker of the
    test's own (Celery's embedded test worker): the tasks that submit and cancel queue (through the outbox) travel
    as they do in production, routed to that queue, acknowledged late, retried with their countdown. Started on
    the first `start()`: what was queued before waits for it, as for a worker that is not up yet."""

    def __init__(self) -> None:
        self._context: contextlib.ExitStack | None = None

    def start(self) -> None:
        if self._context is None:
            self._context = contextlib.ExitStack()
            self._context.enter_context(
                start_worker(app, pool="solo", queues=["kubernetes"], perform_ping_check=False, shutdown_timeout=30)
            )

    def stop(self) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None


@pytest.fixture
def kube_worker(cluster) -> Iterator[KubeWorker]:
    for queue in memory.Channel.queues.values():  # nothing another test queued
        queue.queue.clear()
    with celery_broker("memory://", None, {}):
        worker = KubeWorker()
        try:
            yield worker
        finally:
            worker.stop()


@pytest.fixture
def run_controller(cluster, kube_worker) -> Iterator[Callable[..., ControllerThread]]:
    """Starts a controller (the leader) and, with the first one, the worker that does the units of work."""
    started: list[ControllerThread] = []

    def start(timing: Timing = FAST) -> ControllerThread:
        kube_worker.start()
        thread = ControllerThread(timing).start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        if thread.controller is not None and not thread.controller.crashed:
            thread.stop()


def wait_for(condition: Callable[[], object], timeout: float = 30, message: str = "") -> object:
    """Poll `condition` until it is truthy (returns it) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message or f"timed out waiting for {condition}")
        time.sleep(0.02)


def row_state(uid: str) -> str:
    return KubeWorkload.objects.values_list("state", flat=True).get(uid=uid)


def fresh_runtime() -> KubernetesRuntime:
    """The runtime with its short-lived memories (controller addresses, readiness) forgotten."""
    from apps.runtime.kubernetes import runtime

    runtime._addresses = (0.0, [])
    runtime._ready_at = float("-inf")
    return KubernetesRuntime()


def mine(workload: Workload, uid: str, **changes: object) -> Workload:
    """A sample workload under another uid, reporting to the recording listener (and to nobody else)."""
    return dataclasses.replace(workload, uid=uid, labels={LABEL: uid}, **changes)
