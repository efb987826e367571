"""A kubelet and the operators, simulated: what the real controllers do to the objects the runtime creates.

When a workload object is created (batch/v1 Job, Kubeflow PyTorchJob/TFJob/MPIJob/PaddleJob/XGBoostJob,
Volcano Job, RayJob, Deployment, StatefulSet, InferenceService) its pods appear at once, named and labelled
as the real operator names and labels them, owned by the object (KubeRay's RayCluster step is skipped: the
pods are owned by the RayJob). Tests then move them on (`start`, `log`, `succeed`, `fail`, or the failure
modes), and the primary object's status is written the way its controller writes it, so that the runtime's
`phase_of` reads it unchanged. `autopilot()` does all of that by itself for every new workload.
The pods each operator makes are in operators.py, the statuses each controller writes in statuses.py.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.runtime.kubernetes.fakeapi.operators import pods_for, suffix
from tests.runtime.kubernetes.fakeapi.statuses import STATUS_WRITERS, family_of
from tests.runtime.kubernetes.fakeapi.store import Key, Store, now_iso

PODS: Key = ("", "pods")
EVENTS: Key = ("", "events")


def image_id(image: str) -> str:
    """The `imageID` the fake kubelet reports for `image`: the repository, pinned by a digest of the name (a
    real one is the registry's manifest digest, e.g. docker.io/library/python@sha256:…)."""
    repository = image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


@dataclass
class Workload:
    """A primary object the simulator looks after."""

    key: Key
    namespace: str
    name: str
    kind: str
    api_version: str

    @property
    def group(self) -> str:
        return self.key[0]


class Simulator:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.workloads: dict[str, Workload] = {}
        self.created = threading.Condition(store.lock)
        self.default_node = "node-1"
        store.on_create.append(self._on_create)
        self._autopilot: dict[str, Any] | None = None
        self._threads: list[threading.Thread] = []
        self.stopping = threading.Event()

    # --- creation: what the operators do at once ---------------------------------------------------

    def _on_create(self, key: Key, obj: dict) -> None:
        kind, api_version = obj.get("kind", ""), obj.get("apiVersion", "")
        expand = pods_for(api_version, kind)
        if expand is None:
            return
        meta = obj["metadata"]
        workload = Workload(key, meta["namespace"], meta["name"], kind, api_version)
        self.workloads[workload.name] = workload
        owner = {
            "apiVersion": api_version,
            "kind": kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for pod_name, template, labels, notes in expand(obj):
            pod_meta = copy.deepcopy(template.get("metadata") or {})
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "labels": {**(pod_meta.get("labels") or {}), **labels},
                    "annotations": {**(pod_meta.get("annotations") or {}), **notes},
                    "ownerReferences": [owner],
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
                "status": {"phase": "Pending", "conditions": [], "qosClass": "BestEffort"},
            }
            self.store.create(PODS, workload.namespace, pod)
        self._set_primary_status(workload, "created")
        self.created.notify_all()
        if self._autopilot is not None:
            self._spawn(self._fly, workload.name)

    # --- looking things up ---------------------------------------------------------------------------

    def wait_created(self, count: int = 1, timeout: float = 10) -> list[str]:
        """Names of the first `count` workloads created (waiting for them)."""
        deadline = time.monotonic() + timeout
        with self.created:
            while len(self.workloads) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.workloads)} workloads were created, not {count}")
                self.created.wait(left)
            return list(self.workloads)[:count]

    def pods(self, name: str) -> list[dict]:
        """The pods of workload `name` (owned by it), by name."""
        workload = self.workloads[name]
        primary = self.store.find(workload.key, workload.namespace, name)
        if primary is None:
            return []
        uid = primary["metadata"]["uid"]
        items, _rv = self.store.list(PODS, workload.namespace)
        return [p for p in items if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]

    def pod_names(self, name: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods(name)]

    # --- pod transitions (the kubelet) ---------------------------------------------------------------

    def _pod(self, namespace: str, pod: str, change: Callable[[dict], None]) -> None:
        self.store.modify(PODS, namespace, pod, change)

    def _container_statuses(self, pod: dict, state: dict, *, ready: bool = False, restarts: int = 0) -> list[dict]:
        return [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                # A real kubelet reports the resolved image once the container was created from it.
                "imageID": image_id(c.get("image", "")) if "running" in state or "terminated" in state else "",
                "ready": ready,
                "restartCount": restarts,
                "started": "running" in state,
                "state": copy.deepcopy(state),
            }
            for c in pod["spec"].get("containers") or []
        ]

    def schedule_pod(self, namespace: str, pod: str, node: str | None = None) -> None:
        def change(obj: dict) -> None:
            obj["spec"]["nodeName"] = node or self.default_node
            obj["status"].update(
                phase="Pending",
                conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso()}],
                containerStatuses=self._container_statuses(obj, {"waiting": {"reason": "ContainerCreating"}}),
            )

        self._pod(namespace, pod, change)

    def start_pod(self, namespace: str, pod: str, node: str | None = None) -> None:
        def change(obj: dict) -> None:
            obj["spec"].setdefault("nodeName", node or self.default_node)
            obj["status"].update(
                phase="Running",
                startTime=now_iso(),
                podIP="10.0.0.1",
                conditions=[
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                containerStatuses=self._container_statuses(obj, {"running": {"startedAt": now_iso()}}, ready=True),
            )

        self._pod(namespace, pod, change)

    def end_pod(self, namespace: str, pod: str, exit_code: int = 0, reason: str = "", *, message: str = "") -> None:
        reason = reason or ("Completed" if exit_code == 0 else "Error")

        def change(obj: dict) -> None:
            obj["spec"].setdefault("nodeName", self.default_node)
            terminated = {"exitCode": exit_code, "reason": reason, "startedAt": now_iso(), "finishedAt": now_iso()}
            if message:
                terminated["message"] = message
            obj["status"].update(
                phase="Succeeded" if exit_code == 0 else "Failed",
                conditions=[{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
                containerStatuses=self._container_statuses(obj, {"terminated": terminated}),
            )

        self._pod(namespace, pod, change)

    def log_pod(self, namespace: str, pod: str, lines: list[str], *, same_time: bool = False) -> None:
        self.store.append_log(namespace, pod, lines, same_time=same_time)

    def event(self, namespace: str, pod: str, reason: str, message: str, *, source: str = "kubelet") -> None:
        """A v1 Event about a pod, as the kubelet or the scheduler records one."""
        obj = self.store.get(PODS, namespace, pod)
        self.store.create(
            EVENTS,
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{pod}.{suffix(16)}"},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod,
                    "namespace": namespace,
                    "uid": obj["metadata"]["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "count": 1,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "source": {"component": source},
            },
        )

    # --- the failure modes ---------------------------------------------------------------------------

    def image_pull_backoff(self, name: str, image: str = "") -> None:
        """Every pod of `name` cannot pull its image (the kubelet backs off; the workload stays pending)."""
        workload = self.workloads[name]
        for pod in self.pods(name):
            pod_name = pod["metadata"]["name"]
            pulled = image or pod["spec"]["containers"][0].get("image", "")

            def change(obj: dict, pulled: str = pulled) -> None:
                obj["spec"].setdefault("nodeName", self.default_node)
                waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{pulled}"'}
                obj["status"].update(
                    phase="Pending",
                    conditions=[{"type": "PodScheduled", "status": "True"}],
                    containerStatuses=self._container_statuses(obj, {"waiting": waiting}),
                )

            self._pod(workload.namespace, pod_name, change)
            self.event(
                workload.namespace,
                pod_name,
                "Failed",
                f'Failed to pull image "{pulled}": rpc error: code = NotFound desc = failed to pull and unpack image '
                f'"{pulled}": not found',
            )
            self.event(workload.namespace, pod_name, "BackOff", f'Back-off pulling image "{pulled}"')

    def unschedulable(self, name: str, message: str) -> None:
        """No node fits: the scheduler sets PodScheduled=False and records FailedScheduling."""
        workload = self.workloads[name]
        for pod in self.pods(name):
            pod_name = pod["metadata"]["name"]

            def change(obj: dict) -> None:
                obj["status"].update(
                    phase="Pending",
                    conditions=[
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                            "lastTransitionTime": now_iso(),
                        }
                    ],
                )

            self._pod(workload.namespace, pod_name, change)
            self.event(workload.namespace, pod_name, "FailedScheduling", message, source="default-scheduler")

    def oom_kill(self, name: str, pod: str | None = None) -> str:
        """A replica is killed for exceeding its memory limit; the workload fails. Returns the pod's name."""
        workload = self.workloads[name]
        pod = pod or self.pod_names(name)[-1]
        self.end_pod(workload.namespace, pod, 137, "OOMKilled")
        self._set_primary_status(workload, "failed")
        return pod

    def evict(self, name: str, pod: str | None = None, message: str = "The node was low on resource: memory.") -> str:
        workload = self.workloads[name]
        pod = pod or self.pod_names(name)[-1]

        def change(obj: dict) -> None:
            obj["status"].update(
                phase="Failed",
                reason="Evicted",
                message=message,
                conditions=[
                    {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message}
                ],
                containerStatuses=self._container_statuses(
                    obj, {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}
                ),
            )

        self._pod(workload.namespace, pod, change)
        self.event(workload.namespace, pod, "Evicted", message)
        self._set_primary_status(workload, "failed")
        return pod

    # --- whole workloads -----------------------------------------------------------------------------

    def start(self, name: str) -> None:
        workload = self.workloads[name]
        for pod in self.pod_names(name):
            self.start_pod(workload.namespace, pod)
        self._set_primary_status(workload, "running")

    def log(self, name: str, pod: str, lines: list[str], *, same_time: bool = False) -> None:
        self.log_pod(self.workloads[name].namespace, pod, lines, same_time=same_time)

    def succeed(self, name: str) -> None:
        workload = self.workloads[name]
        for pod in self.pod_names(name):
            self.end_pod(workload.namespace, pod, 0)
        self._set_primary_status(workload, "succeeded")

    def fail(self, name: str, pod: str | None = None, exit_code: int = 1, reason: str = "Error") -> str:
        workload = self.workloads[name]
        pod = pod or self.pod_names(name)[-1]
        self.end_pod(workload.namespace, pod, exit_code, reason)
        self._set_primary_status(workload, "failed")
        return pod

    # --- autopilot -----------------------------------------------------------------------------------

    def autopilot(self, *, outcome: str = "succeeded", lines: int = 3, delay: float = 0.05, hold: float = 0.0) -> None:
        """From now on every new workload runs by itself: scheduled, started, `lines` lines per pod (one
        every `delay` s), then `outcome` ("succeeded", "failed", "hold" = keep running) after `hold` s."""
        with self.store.lock:
            self._autopilot = {"outcome": outcome, "lines": lines, "delay": delay, "hold": hold}

    def _fly(self, name: str) -> None:
        plan = self._autopilot or {}
        workload = self.workloads[name]
        try:
            time.sleep(plan["delay"])
            for pod in self.pod_names(name):
                self.schedule_pod(workload.namespace, pod)
            time.sleep(plan["delay"])
            self.start(name)
            for i in range(plan["lines"]):
                if self.stopping.is_set():
                    return
                time.sleep(plan["delay"])
                for pod in self.pod_names(name):
                    self.log_pod(workload.namespace, pod, [f"{pod} line {i}"])
            deadline = time.monotonic() + plan["hold"]
            while time.monotonic() < deadline and not self.stopping.is_set():
                time.sleep(0.02)
            if plan["outcome"] == "succeeded":
                self.succeed(name)
            elif plan["outcome"] == "failed":
                self.fail(name)
        except Exception:  # the workload was deleted under us (cancel): nothing left to fly
            return

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)

    # --- the primary object's status, as its controller writes it -----------------------------------

    def _set_primary_status(self, workload: Workload, stage: str) -> None:
        pods = self.pods(workload.name)
        setter = STATUS_WRITERS[family_of(workload.key, workload.kind)]

        def change(obj: dict) -> None:
            obj["status"] = setter(obj, stage, pods)

        primary = self.store.modify(workload.key, workload.namespace, workload.name, change)
        if stage == "failed":
            self._clean_up(workload, primary, pods)

    def _clean_up(self, workload: Workload, primary: dict, pods: list[dict]) -> None:
        """What the controllers do to the pods still running when a job fails: the Job controller and Volcano
        terminate them; the training operator does when runPolicy.cleanPodPolicy says Running or All."""
        family = family_of(workload.key, workload.kind)
        if family in ("deployment", "statefulset", "kserve"):
            return
        if family == "kubeflow":
            policy = ((primary.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy", "None")
            if policy not in ("Running", "All"):
                return
        for pod in pods:
            if pod["status"].get("phase") in ("Pending", "Running"):
                self.store.delete(PODS, workload.namespace, pod["metadata"]["name"], "Background")
