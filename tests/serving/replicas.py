"""Real model-server processes for the router tests, and the service/revision/replica rows that point at them.

`iris_model()` trains the iris LogisticRegression and saves it with joblib; `ModelServer` runs
`python -m apps.serving.modelserver` on it (a free port, read from the line it prints once it listens) and reads
its own /metrics, so a test can tell how many requests each replica really answered.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.accounts.models import hash_token
from apps.serving.models import InferenceService, Replica, Revision

START_SECONDS = 90  # sklearn imports in ~2 s on an idle machine; a loaded CI box is slower
LISTENING = re.compile(r"modelserver: serving \S+ .* on (http://[\d.]+:\d+)")
IRIS_ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]
IRIS_CLASSES = [0, 2, 1]


def iris_model(folder: Path) -> Path:
    """An iris LogisticRegression saved by joblib in `folder` (what the sklearn-train template writes)."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    path = folder / "model.joblib"
    joblib.dump(LogisticRegression(max_iter=1000).fit(x, y), path)
    return path


def infer_body(rows: list[list[float]] = IRIS_ROWS) -> dict:
    flat = [v for row in rows for v in row]
    return {"inputs": [{"name": "input-0", "shape": [len(rows), len(rows[0])], "datatype": "FP64", "data": flat}]}


class ModelServer:
    """One replica: a model-server process on a free loopback port."""

    def __init__(self, model: Path, name: str = "iris") -> None:
        self.model, self.name = model, name
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []

    def start(self) -> ModelServer:
        return self.launch().wait_listening()

    def launch(self) -> ModelServer:
        command = [sys.executable, "-m", "apps.serving.modelserver", "--name", self.name]
        command += ["--model", str(self.model), "--port", "0"]
        self.process = subprocess.Popen(
            command, cwd=settings.BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ
        )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def wait_listening(self) -> ModelServer:
        deadline = time.monotonic() + START_SECONDS
        while not self.url:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise RuntimeError("the model server did not start:\n" + "".join(self.output))
            if match := LISTENING.search(line):
                self.url = match.group(1)
        # The line is printed before uvicorn listens on the bound socket: until then a connection is refused.
        while True:
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or (self.process is not None and self.process.poll() is not None):
                self.stop()
                raise RuntimeError("the model server did not become ready:\n" + "".join(self.output))
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def kill(self) -> None:
        """Gone at once (SIGKILL): its port refuses connections from now on."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def answered(self) -> int:
        """Inference requests this process answered (any status), from its own /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(int(float(m)) for m in re.findall(r"^modelserver_requests_total\{[^}]*\} (\S+)$", text, re.M))


def make_service(project, name: str = "iris", *, auth: str = "token", key: str = "") -> InferenceService:
    return InferenceService.objects.create(
        project=project,
        name=name,
        auth=auth,
        key_prefix=key[:12],
        key_digest=hash_token(key) if key else "",
        status=InferenceService.Status.READY,
    )


def add_revision(service: InferenceService, number: int, *servers: ModelServer) -> Revision:
    """Revision `number` of `service`, READY, with one READY replica per server."""
    revision = Revision.objects.create(service=service, number=number, status=Revision.Status.READY)
    for index, server in enumerate(servers):
        Replica.objects.create(revision=revision, index=index, upstream=server.url, status=Replica.Status.READY)
    return revision


def start_all(model: Path, count: int) -> list[ModelServer]:
    """`count` servers started side by side (each spends its start importing scikit-learn)."""
    servers = [ModelServer(model).launch() for _ in range(count)]
    try:
        return [server.wait_listening() for server in servers]
    except BaseException:
        for server in servers:
            server.stop()
        raise


@pytest.fixture(scope="session")
def iris_path(tmp_path_factory) -> Path:
    return iris_model(tmp_path_factory.mktemp("iris"))


@pytest.fixture(scope="session")
def replicas(iris_path) -> Iterator[list[ModelServer]]:
    """Four long-lived replicas shared by the router tests (tests that kill one start their own)."""
    servers = start_all(iris_path, 4)
    yield servers
    for server in servers:
        server.stop()
