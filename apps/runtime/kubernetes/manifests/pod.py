"""The one pod-template builder every kind uses: image, command, the env contract, resources and accelerators,
where the pod may run, volumes, labels.

What a workload asks for that this cluster cannot give (a GPU type without a node label for it, a vGPU resource
the cluster does not name, RDMA on a cluster without it) is a ManifestError naming the workload's field."""

from __future__ import annotations

import copy
import re
from typing import Any

from apps.projects.secrets import referenced_name
from apps.runtime import priority
from apps.runtime.kubernetes.manifests.meta import (
    ANNOTATION_DEFAULT_CONTAINER,
    ManifestError,
    env_secret_name,
    label_value,
    workload_annotations,
    workload_labels,
)
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.workload import Workload
from portal.lib import sealed
from portal.lib.resources import memory_quantity

# "{python}" / "{python:<env>}" name a task environment's interpreter on the portal's machine; on a cluster the
# image provides the interpreter, so both become plain `python`.
_PYTHON_TOKEN = re.compile(r"^\{python(?::[^{}]*)?\}$")
WORK_VOLUME = "portal-work"


def command_of(workload: Workload) -> list[str]:
    return ["python" if _PYTHON_TOKEN.match(token) else token for token in workload.command]


def _whole(amount: float, field: str, hint: str = "") -> str:
    if not float(amount).is_integer():
        raise ManifestError(f"{field}: {amount:g} is not a whole number{hint}")
    return str(int(amount))


def has_gpu(workload: Workload) -> bool:
    return workload.resources.gpu > 0 or any(amount > 0 for amount in workload.resources.vgpu.values())


def env_of(workload: Workload, accelerators: bool = True) -> list[dict[str, str]]:
    """The workload's env as given (the portal's contract: PORTAL_*, MLFLOW_*, the pipeline's and the task's),
    plus what the local runtime also gives every process. `accelerators` False: a container without the GPUs.
    A project secret (`${secret:NAME}`) or a sealed token (`${sealed:…}`, portal/lib/sealed.py) is read from the
    workload's env Secret (meta.env_secret_name), so its value is in no manifest: the controller fills that Secret
    when it applies the workload (apply.env_secret)."""
    env = {str(key): str(value) for key, value in workload.env.items()}
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the log as they are printed
    if not (accelerators and has_gpu(workload)):
        # Without this, an image built on nvidia/cuda sees every GPU of the node where the runtime exposes them.
        env.setdefault("NVIDIA_VISIBLE_DEVICES", "none")
    secret = env_secret_name(workload)
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        if referenced_name(value) is not None or sealed.is_reference(value)
        else {"name": key, "value": value}
        for key, value in env.items()
    ]


def resources_of(workload: Workload, profile: ClusterProfile, accelerators: bool = True) -> dict[str, Any]:
    """requests/limits. CPU is requested but not limited (a CPU limit throttles bursts for nothing); memory is
    both (the node stays safe and an overrun is reported as OOMKilled); GPUs, vGPU shares and RDMA devices are
    extended resources, which Kubernetes takes as limits."""
    res = workload.resources
    quantities = res.kubernetes()
    requests, limits = quantities["requests"], quantities["limits"]
    if accelerators:
        if res.gpu > 0:
            limits[profile.gpu_resource] = _whole(res.gpu, "resources.gpu", " (ask for a vGPU share instead)")
        for key, amount in res.vgpu.items():
            if key not in profile.vgpu_resources:
                known = ", ".join(sorted(profile.vgpu_resources)) or "none"
                raise ManifestError(
                    f"resources.vgpu.{key}: cluster {profile.name!r} has no vGPU resource {key!r} (it has: {known})"
                )
            if amount > 0:
                limits[profile.vgpu_resources[key]] = _whole(amount, f"resources.vgpu.{key}")
        if workload.rdma:
            if not profile.rdma_resource:
                raise ManifestError(f"rdma: cluster {profile.name!r} has no RDMA resource")
            limits[profile.rdma_resource] = "1"
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def node_selector_of(workload: Workload, profile: ClusterProfile, accelerators: bool = True) -> dict[str, str]:
    """The cluster's selector (its resource group), the workload's, and the GPU type's label."""
    selector = dict(profile.node_selector)
    for key, value in workload.node_selector.items():
        if selector.get(key, value) != value:
            raise ManifestError(f"node_selector.{key}: cluster {profile.name!r} pins it to {selector[key]!r}")
        selector[key] = value
    gpu_type = workload.resources.gpu_type
    if gpu_type and accelerators:
        if not has_gpu(workload):
            raise ManifestError(f"resources.gpu_type: {gpu_type!r} is asked for, but no GPU")
        if not profile.gpu_type_label:
            raise ManifestError(f"resources.gpu_type: cluster {profile.name!r} has no node label for GPU types")
        if label_value(gpu_type) != gpu_type:
            raise ManifestError(f"resources.gpu_type: {gpu_type!r} cannot be a node label value")
        if selector.get(profile.gpu_type_label, gpu_type) != gpu_type:
            raise ManifestError(f"resources.gpu_type: node_selector already asks for {profile.gpu_type_label}")
        selector[profile.gpu_type_label] = gpu_type
    return selector


def _volume_source(volume: dict[str, Any]) -> dict[str, Any]:
    kind, source, read_only = volume["kind"], volume["source"], volume["read_only"]
    flag = {"readOnly": True} if read_only else {}
    if kind == "pvc":
        return {"persistentVolumeClaim": {"claimName": source, **flag}}
    if kind == "host_path":
        return {"hostPath": {"path": source}}
    if kind == "nfs":
        server, _, path = source.partition(":")
        return {"nfs": {"server": server, "path": path, **flag}}
    if kind == "config_map":
        return {"configMap": {"name": source}}
    if kind == "secret":
        return {"secret": {"secretName": source}}
    size = {"sizeLimit": memory_quantity(volume["size"])} if volume["size"] else {}
    if kind == "shm":
        # Docker's 64 MiB /dev/shm is too small for PyTorch's DataLoader workers and NCCL.
        return {"emptyDir": {"medium": "Memory", **size}}
    return {"emptyDir": size}


def volumes_of(workload: Workload, profile: ClusterProfile) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container volumeMounts): the workload's volumes, and the cluster's shared work folder
    (so that PORTAL_OUTPUT_DIR and PORTAL_INPUT_<NODE> mean the same path in the pod as in the portal)."""
    volumes, mounts = [], []
    for i, volume in enumerate(workload.volumes):
        name = f"{volume['kind'].replace('_', '-')}-{i}"
        if profile.work_claim and profile.work_dir and volume["mount_path"] == profile.work_dir:
            raise ManifestError(
                f"volumes[{i}].mount_path: {profile.work_dir} is where cluster {profile.name!r} mounts the work folder"
            )
        volumes.append({"name": name, **_volume_source(volume)})
        mounts.append(
            {"name": name, "mountPath": volume["mount_path"], **({"readOnly": True} if volume["read_only"] else {})}
        )
    if profile.work_claim and profile.work_dir:
        volumes.append({"name": WORK_VOLUME, "persistentVolumeClaim": {"claimName": profile.work_claim}})
        mounts.append({"name": WORK_VOLUME, "mountPath": profile.work_dir})
    return volumes, mounts


def scheduling_of(
    workload: Workload, profile: ClusterProfile, accelerators: bool = True, *, by_volcano: bool = False
) -> dict[str, Any]:
    """The pod-level fields that place the pod and let it pull its image. `by_volcano`: Volcano schedules the pod
    (see `pod_template`), so it names no scheduler of the cluster's."""
    spec: dict[str, Any] = {}
    if profile.scheduler_name and not by_volcano:
        # The cluster asks for packing (Cluster.placement): a scheduler profile that fills partly used nodes first
        # (k8s/scheduler/). Every kind's pods pass here, so all of them are placed alike.
        spec["schedulerName"] = profile.scheduler_name
    selector = node_selector_of(workload, profile, accelerators)
    if selector:
        spec["nodeSelector"] = selector
    if workload.tolerations:
        spec["tolerations"] = [dict(t) for t in workload.tolerations]
    if affinity := affinity_of(workload):
        spec["affinity"] = affinity
    if workload.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in workload.image_pull_secrets]
    if name := priority_class_of(workload, profile):
        spec["priorityClassName"] = name
    return spec


def affinity_of(workload: Workload) -> dict[str, Any]:
    """The workload's affinity, plus, when it has `avoid_nodes` (nodes the queue keeps for a task it reserved them
    for: docs/scheduling.md, "Node-level reservations"), a required node affinity on the node's name (`matchFields`
    `metadata.name` NotIn: the names the inventory recorded, exactly, as the DaemonSet controller pins pods; a
    `kubernetes.io/hostname` label can differ from the name). Node selector terms are ORed and a term's requirements
    ANDed, so it joins every term (or is the one term where there is none); preferred terms and pod (anti-)affinity
    stay as they are. The workload's dict is not changed."""
    if not workload.avoid_nodes:
        return dict(workload.affinity)
    affinity = copy.deepcopy(workload.affinity)
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": workload.avoid_nodes}
    try:
        node = affinity["nodeAffinity"] = affinity.get("nodeAffinity") or {}
        required = node["requiredDuringSchedulingIgnoredDuringExecution"] = (
            node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        )
        required["nodeSelectorTerms"] = [
            {**term, "matchFields": [*(term.get("matchFields") or []), copy.deepcopy(avoid)]}
            for term in required.get("nodeSelectorTerms") or [{}]
        ]
    except (AttributeError, TypeError):
        raise ManifestError("affinity.nodeAffinity: not a Kubernetes NodeAffinity") from None
    return affinity


def priority_class_of(workload: Workload, profile: ClusterProfile) -> str:
    """The PriorityClass of a task's run priority on a cluster that has the portal's classes; "" otherwise."""
    if workload.priority is None or not profile.priority_classes:
        return ""
    return priority.class_name(workload.priority)


def container_of(
    workload: Workload,
    profile: ClusterProfile,
    *,
    name: str,
    command: list[str] | None,
    ports: dict[str, int] | None = None,
    accelerators: bool = True,
    mounts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The workload's container. `command` None leaves the image's (or the operator's) own."""
    if not workload.image:
        raise ManifestError("image: a workload on Kubernetes needs a container image")
    container: dict[str, Any] = {"name": name, "image": workload.image}
    if command:
        container["command"] = list(command)
    if workload.workdir:
        container["workingDir"] = workload.workdir
    container["env"] = env_of(workload, accelerators)
    if ports:
        container["ports"] = [{"name": port_name, "containerPort": port} for port_name, port in ports.items()]
    resources = resources_of(workload, profile, accelerators)
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    if workload.rdma and accelerators:
        # RDMA registers (pins) memory, which an unprivileged container may only do with IPC_LOCK.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return container


def pod_template(
    workload: Workload,
    profile: ClusterProfile,
    *,
    role: str,
    container: str,
    restart_policy: str,
    command: list[str] | None,
    ports: dict[str, int] | None = None,
    accelerators: bool = True,
    probe: dict[str, Any] | None = None,
    by_volcano: bool = False,
) -> dict[str, Any]:
    """A PodTemplateSpec for one role of the workload. `accelerators` False leaves out GPUs, vGPU shares and RDMA
    (an MPI launcher only runs mpirun). `by_volcano`: the pod is Volcano's to schedule — a Volcano job's (its
    controller gives the pods the job's schedulerName, "volcano", only when they name none), or a Kubeflow job's
    whose operator hands its gangs to Volcano (it leaves a pod that names another scheduler out of the gang) — so
    it names no scheduler even on a cluster that asks for packing; Volcano packs with its binpack plugin."""
    volumes, mounts = volumes_of(workload, profile)
    main = container_of(
        workload, profile, name=container, command=command, ports=ports, accelerators=accelerators, mounts=mounts
    )
    if probe:
        main["readinessProbe"] = probe
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        # Service links would put <SERVICE>_PORT=tcp://… of every Service in the namespace into the env, where a
        # Service named "master" clashes with the MASTER_PORT the distributed frameworks read.
        "enableServiceLinks": False,
        "containers": [main],
    }
    if volumes:
        spec["volumes"] = volumes
    spec.update(scheduling_of(workload, profile, accelerators, by_volcano=by_volcano))
    annotations = {**workload_annotations(workload), ANNOTATION_DEFAULT_CONTAINER: container}
    return {"metadata": {"labels": workload_labels(workload, role), "annotations": annotations}, "spec": spec}
