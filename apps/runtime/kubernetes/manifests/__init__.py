"""Workload → Kubernetes objects, one small module per kind, all sharing one pod-template builder.

The contract the runtime and the controller rely on (implemented by the kind modules of this package):

- `build(workload, profile) -> list[dict]`: every object to apply, as plain dicts (what
  `ApiClient().sanitize_for_serialization` gives), the *primary* object first (the one whose status is the
  workload's phase: a Job, a PyTorchJob, a Volcano Job, a Deployment, a StatefulSet, an InferenceService …),
  then its companions (Service, HPA, …). Names are deterministic from `workload.uid` (`object_name`), so
  applying twice finds the same objects. Every object and every pod template carries `LABEL_UID`
  (`label_value(uid)`) and `LABEL_MANAGED`; pod templates also carry `LABEL_ROLE` and name the container whose
  output is the log (`log_container(pod)`). Raises `ManifestError` (a ValueError) naming the field when the
  workload cannot be expressed on this cluster (e.g. a PyTorchJob on a cluster without the training operator,
  or a GPU type without a label to select it).
- `phase_of(obj) -> tuple[Phase, str]`: the phase of the workload and a reason, read from the primary
  object's status (Job conditions, Kubeflow conditions, Volcano state, RayJob jobStatus, SparkApplication
  applicationState, Deployment availability, …); PENDING while nothing says otherwise.
- `replica_of(pod) -> str`: the replica name used in logs, e.g. "master-0", "worker-1", "0".
- `resource_of(api_version, kind) -> Resource`: plural and namespacing, for the generic client calls.

Modules: `meta` (labels, names, the resource table), `pod` (the pod template), one per kind: `job`, `kubeflow`
(PyTorchJob, TFJob, MPIJob, PaddleJob, XGBoostJob), `volcano`, `ray`, `spark` (SparkApplication), `deployment`
(Deployment + Service + HPA), `kserve`, `notebook` (StatefulSet + Service); `dispatch` chooses among them. Which
replica counts mean what is documented in each kind's module.
"""

from __future__ import annotations

from apps.runtime.kubernetes.manifests.dispatch import FRAMEWORKS, KINDS, build, log_container, phase_of, replica_of
from apps.runtime.kubernetes.manifests.meta import (
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_UID,
    MANAGED_BY,
    ManifestError,
    Resource,
    label_value,
    object_name,
    resource_of,
)

__all__ = [
    "FRAMEWORKS",
    "KINDS",
    "LABEL_MANAGED",
    "LABEL_ROLE",
    "LABEL_UID",
    "MANAGED_BY",
    "ManifestError",
    "Resource",
    "build",
    "label_value",
    "log_container",
    "object_name",
    "phase_of",
    "replica_of",
    "resource_of",
]
