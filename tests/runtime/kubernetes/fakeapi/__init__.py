"""An in-test Kubernetes API server on loopback, driven by the real `kubernetes` client through a kubeconfig.

No API server can run on these machines, so this package stands in for one: the REST paths the runtime uses
for any group/version/plural (create with 409 AlreadyExists, get, list with label and field selectors,
watch with resourceVersion resume and 410 Gone, delete with propagationPolicy, merge patch and replace of
status, pod logs with follow/sinceTime/timestamps, nodes, events), fault injection (`faults`), and a
simulated kubelet and operators (`sim`).

    fake = FakeKube().start()
    cluster = Cluster.objects.create(name="fake", kubeconfig=fake.kubeconfig())
    fake.faults.fail("POST", r"/jobs$", 500)
    ...
    fake.stop()
"""

from __future__ import annotations

import threading
from typing import Any

import yaml

from tests.runtime.kubernetes.fakeapi.faults import Fault, Faults
from tests.runtime.kubernetes.fakeapi.server import Server
from tests.runtime.kubernetes.fakeapi.simulator import Simulator
from tests.runtime.kubernetes.fakeapi.store import ApiError, Key, Store

__all__ = ["ApiError", "FakeKube", "Fault", "Faults", "Key", "Simulator", "Store"]


class FakeKube:
    """The fake API server: `store` (state), `faults`, `sim`, and `requests` (every request seen)."""

    def __init__(self, *, token: str = "fake-token", version: str = "1.33", history: int = 2000) -> None:
        self.token = token
        self.version = version
        self.store = Store(history=history)
        self.faults = Faults()
        self.sim = Simulator(self.store)
        self.requests: list[tuple[str, str, str]] = []
        self._requests_lock = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> FakeKube:
        self._server = Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.sim.stop()
        if self._server is not None:
            self._server.stopping = True
            with self.store.lock:
                self.store.cond.notify_all()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake API server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, *, context: str = "fake", namespace: str = "default", token: str | None = None) -> str:
        """A kubeconfig (YAML) whose current context points at this server."""
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "tester", "user": {"token": token or self.token}}],
                "contexts": [
                    {"name": context, "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}
                ],
                "current-context": context,
            }
        )

    def version_info(self) -> dict[str, str]:
        major, minor = self.version.split(".")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{self.version}.0",
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    # --- observation ---------------------------------------------------------------------------------

    def record(self, method: str, path: str, query: str) -> None:
        with self._requests_lock:
            self.requests.append((method, path, query))

    def requests_to(self, method: str, path_part: str) -> list[tuple[str, str, str]]:
        with self._requests_lock:
            return [r for r in self.requests if r[0] == method and path_part in r[1]]

    def objects(self, group: str, plural: str, namespace: str | None = None, label_selector: str = "") -> list[dict]:
        return self.store.list((group, plural), namespace, label_selector)[0]

    # --- cluster furniture ---------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpu: int = 0,
        gpu_resource: str = "nvidia.com/gpu",
        labels: dict[str, str] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        resources = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpu:
            resources[gpu_resource] = str(gpu)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        return self.store.create(("", "nodes"), "", node)
