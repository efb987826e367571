"""Services for the control-plane tests: iris models saved with joblib into the artifact store and registered as
model versions (through the registry service, as a pipeline's model-register task does), a real agent, and a
driver that does what the workers would (the periodic reconcile) until a condition holds.

Import the fixtures a test module needs from here (`from tests.serving.factories import artifact_store, ...`).
"""

from __future__ import annotations

import io
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from apps.models import artifacts
from apps.models.models import ModelVersion
from apps.models.registry import create_model_version
from apps.runtime.models import Agent
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import rollout
from tests.factories import registered_model, tracking_run
from tests.jobs.conftest import AgentProcess

IRIS_ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]
IRIS_CLASSES = [0, 2, 1]
READY_SECONDS = 120  # a model server imports sklearn in ~2 s on an idle machine; a loaded CI box is slower


@pytest.fixture
def artifact_store(settings, tmp_path):
    """Each test its own artifact folder (experiment ids repeat across test databases)."""
    location = tmp_path / "artifacts"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
    }
    return location


@pytest.fixture
def fast_serving(settings):
    """Short drain and scale-down delays, so that a test sees the whole lifecycle in seconds."""
    settings.PORTAL_SERVING_DRAIN_SECONDS = 1
    settings.PORTAL_SERVING_SCALE_DOWN_DELAY = 2
    settings.PORTAL_SERVING_READY_TIMEOUT = READY_SECONDS
    return settings


@pytest.fixture
def svc_agent(transactional_db, tmp_path, settings, artifact_store, fast_serving):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    process = AgentProcess(tmp_path, env={"PORTAL_WORK_DIR": str(settings.PORTAL_WORK_DIR)})
    process.start()
    yield process
    process.stop()


def iris_bytes(max_iter: int = 500, c: float = 1.0) -> bytes:
    """A LogisticRegression on iris, as joblib writes it."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    buffer = io.BytesIO()
    joblib.dump(LogisticRegression(max_iter=max_iter, C=c).fit(x, y), buffer)
    return buffer.getvalue()


def register(project, owner, content: bytes, model_name: str = "iris-classifier") -> ModelVersion:
    """A new version of `model_name` whose files are `model/model.joblib` of a fresh run."""
    run = tracking_run(project, owner, name=f"train-{time.monotonic_ns()}")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    artifacts.save(f"{base}/model/model.joblib", io.BytesIO(content))
    return create_model_version(registered_model(project, model_name), source=f"runs:/{run.run_uuid}/model", run=run)


def service(project, owner=None, name: str = "iris", **fields: Any) -> InferenceService:
    """A bare service row (nothing deployed), for pages and permission tests."""
    return InferenceService.objects.create(project=project, name=name, created_by=owner, **fields)


def drive(
    svc: InferenceService,
    until: Callable[[InferenceService], bool],
    timeout: float = READY_SECONDS,
    on_pass: Callable[[], None] | None = None,
) -> InferenceService:
    """Run the reconcile pass (what beat does every few seconds) until `until(service)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        rollout.reconcile()
        if on_pass is not None:
            on_pass()
        svc.refresh_from_db()
        if until(svc):
            return svc
        if time.monotonic() > deadline:
            replicas = list(
                Replica.objects.filter(revision__service=svc).values(
                    "revision__number", "index", "status", "reason", "log_tail"
                )
            )
            raise AssertionError(f"service {svc.status} ({svc.reason}) after {timeout} s; replicas: {replicas}")
        time.sleep(0.2)


def ready_replicas(revision: Revision) -> list[Replica]:
    return list(revision.replicas.filter(status=Replica.Status.READY).order_by("index"))


def post_json(url: str, body: Any, timeout: float = 10) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def get_json(url: str, timeout: float = 10) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def infer_body(rows: list[list[float]] = IRIS_ROWS) -> dict:
    return {"inputs": [{"name": "input-0", "shape": [len(rows), len(rows[0])], "datatype": "FP64",
                        "data": [v for row in rows for v in row]}]}  # fmt: skip


def predictions(body: dict) -> list:
    out = {o["name"]: o["data"] for o in body["outputs"]}
    return out.get("predict") or body["outputs"][0]["data"]


def heartbeat_agent(cpu: float = 8, memory_bytes: int = 16 * 2**30) -> Agent:
    """A live local agent as the runtime sees it: deploys are accepted and their workloads wait (nothing runs them)."""
    return Agent.objects.create(hostname=socket.gethostname(), pid=os.getpid(), address="127.0.0.1:9",
                                capacity={"cpu": cpu, "memory_bytes": memory_bytes, "gpu": 0})  # fmt: skip


def make_ready(revision: Revision) -> Revision:
    """What the readiness probe would do for replicas nothing runs: mark them ready (the state machine moves on)."""
    for replica in revision.replicas.filter(status=Replica.Status.STARTING):
        Replica.objects.filter(pk=replica.pk).update(upstream=f"http://127.0.0.1:{9000 + replica.pk}")
        rollout.mark_ready(replica.pk)
    revision.refresh_from_db()
    return revision


@pytest.fixture
def eager_celery():
    """Tasks run in the caller when queued (the real task code, without a worker)."""
    from portal.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = previous
