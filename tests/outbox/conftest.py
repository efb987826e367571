"""A broker that is down, and a broker of the test's own with a real worker on it (both of the configured kind)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from django.conf import settings

from portal.celery import app, worker_command
from portal.lib.serve import free_port
from tests.conftest import database_url_of_test_db


@contextmanager
def celery_broker(url: str, transport: str | None, options: dict) -> Iterator[None]:
    """Send this process's Celery messages to another broker for a while. Celery keeps a pool of connections to the
    broker it first reached: they are dropped on the way in and out, as Celery itself does after a fork."""
    conf = app.conf
    saved = conf.broker_url, conf.broker_transport, conf.broker_transport_options
    conf.broker_url, conf.broker_transport, conf.broker_transport_options = url, transport, options
    _forget_connections()
    try:
        yield
    finally:
        conf.broker_url, conf.broker_transport, conf.broker_transport_options = saved
        _forget_connections()


def _forget_connections() -> None:
    # Drops the app's references to its connection and producer pools (kombu keeps the pools themselves, by broker
    # URL, for when that broker is used again), as Celery does after a fork.
    app._after_fork()


@contextmanager
def broker_down() -> Iterator[None]:
    """The broker is unreachable: a Redis URL on a loopback port nothing listens on (connections are refused)."""
    with celery_broker(f"redis://127.0.0.1:{free_port()}/0", None, {}):
        yield


@dataclass
class PrivateBroker:
    """A broker only this test uses, and the environment of a worker process consuming it."""

    url: str
    transport: str | None
    options: dict
    worker_env: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def up(self) -> Iterator[None]:
        with celery_broker(self.url, self.transport, self.options):
            yield


@pytest.fixture
def private_broker(tmp_path) -> PrivateBroker:
    """Redis: the test server under a key prefix of our own; the folder broker: a folder of our own. Either way no
    developer's worker, other test or xdist process sends to it or takes from it."""
    if settings.REDIS_URL:
        prefix = f"test-outbox-{uuid.uuid4().hex[:12]}"
        return PrivateBroker(
            settings.REDIS_URL, None, {"global_keyprefix": f"{prefix}:celery:"}, {"REDIS_PREFIX": prefix}
        )
    var = tmp_path / "broker-var"
    folder = var / "celery"
    for sub in ("queue", "control"):
        (folder / sub).mkdir(parents=True)
    options = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
    }
    return PrivateBroker(
        settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT, options, {"PORTAL_VAR_DIR": str(var)}
    )


@pytest.fixture
def start_worker(tmp_path) -> Iterator[Callable[[PrivateBroker], subprocess.Popen]]:
    """Start a real Celery worker (solo pool) on a private broker, against the test database and this test's
    storage and work folders."""
    procs: list[subprocess.Popen] = []
    log = tmp_path / "worker.log"

    def start(broker: PrivateBroker) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": database_url_of_test_db(),
            "SECRET_KEY": settings.SECRET_KEY,
            "MEDIA_ROOT": str(settings.MEDIA_ROOT),
            "PORTAL_WORK_DIR": str(settings.PORTAL_WORK_DIR),
            **broker.worker_env,
        }
        proc = subprocess.Popen(
            worker_command(pool="solo"), cwd=settings.BASE_DIR, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(condition: Callable[[], bool], worker: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert worker.poll() is None, f"the worker died (exit {worker.returncode})"
        assert time.monotonic() < deadline, f"{what} within {timeout:g} s"
        time.sleep(0.2)
