"""The portal's Celery app, for a worker process a test kills (`celery -A tests.runtime.kubernetes.killable_worker`).

The only difference: with Redis, a message a dead worker held (acknowledged late, so still "unacked") is given back
to the queue after KUBE_TEST_VISIBILITY_TIMEOUT seconds instead of Redis' default hour, and the sweep that gives it
back runs every second instead of every ~100 s. Production keeps the defaults (a long task must not be delivered
twice while it runs); there the repair sweep (apps/runtime/tasks.py, `kube_repair`) queues a lost apply again
sooner."""

from __future__ import annotations

import os

from portal.celery import app

app.conf.broker_transport_options = {
    **(app.conf.broker_transport_options or {}),
    "visibility_timeout": float(os.environ["KUBE_TEST_VISIBILITY_TIMEOUT"]),
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
