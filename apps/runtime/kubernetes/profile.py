"""What the manifest builders need to know of the cluster a workload goes to."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings


@dataclass(frozen=True)
class ClusterProfile:
    name: str = "default"
    namespace: str = "default"
    version: str = "1.33"  # Kubernetes minor version the objects are validated against
    operators: frozenset[str] = frozenset()  # apps.runtime.models.Operator values
    node_selector: dict[str, str] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type_label: str = "gpu-type"
    vgpu_resources: dict[str, str] = field(default_factory=dict)  # e.g. {"memory": "nvidia.com/gpumem"}
    rdma_resource: str = ""  # e.g. "rdma/hca"; empty = no RDMA
    volcano_queue: str = "default"
    priority_classes: bool = False  # the portal's PriorityClasses are installed (apps/runtime/priority.py)
    scheduler_name: str = ""  # pods' spec.schedulerName (a bin-packing profile); empty = the default scheduler
    ttl_seconds_after_finished: int = 3600
    # A ReadWriteMany claim mounted at `work_dir` in every pod, so that a task's PORTAL_OUTPUT_DIR and its
    # PORTAL_INPUT_<NODE> paths mean the same on the cluster as in the portal; empty = no shared folder.
    work_claim: str = ""
    work_dir: str = ""

    @classmethod
    def of(cls, cluster, namespace: str = "") -> ClusterProfile:
        """From a `Cluster` row (and a project's namespace on it)."""
        return cls(
            name=cluster.name,
            namespace=namespace or cluster.default_namespace,
            version=cluster.version,
            operators=frozenset(cluster.operators or ()),
            node_selector=dict(cluster.node_selector or {}),
            gpu_resource=cluster.gpu_resource,
            gpu_type_label=cluster.gpu_type_label,
            vgpu_resources=dict(cluster.vgpu_resources or {}),
            rdma_resource=cluster.rdma_resource,
            volcano_queue=cluster.volcano_queue,
            priority_classes=cluster.priority_classes,
            scheduler_name=cluster.scheduler_name,
            work_claim=cluster.work_volume_claim,
            work_dir=str(settings.PORTAL_WORK_DIR),
        )
