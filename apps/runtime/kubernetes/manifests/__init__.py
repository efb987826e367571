"""Workload → Kubernetes objects, one small module per kind, all sharing one pod-template builder.

The contract the runtime and the controller rely on (implemented by the kind modules of this package):

- `build(workload, profile) -> list[dict]`: every object to apply, as plain dicts (what
  `ApiClient().sanitize_for_serialization` gives), the *primary* object first (the one whose status is the
  workload's phase: a Job, a PyTorchJob, a Volcano Job, a Deployment, a StatefulSet, an InferenceService …),
  then its companions (Service, HPA, …). Names are deterministic from `workload.uid` (`object_name`), so
  applying twice finds the same objects. Every object and every pod template carries `LABEL_UID` (the
  sanitised uid) and `LABEL_MANAGED`; pod templates also carry `LABEL_ROLE`. Raises `ManifestError`
  (a ValueError) naming the field when the workload cannot be expressed on this cluster (e.g. a PyTorchJob
  on a cluster without the training operator, or a GPU type without a label to select it).
- `phase_of(obj) -> tuple[Phase, str]`: the phase of the workload and a reason, read from the primary
  object's status (Job conditions, Kubeflow conditions, Volcano state, RayJob jobStatus, Deployment
  availability, …); PENDING while nothing says otherwise.
- `replica_of(pod) -> str`: the replica name used in logs, e.g. "master-0", "worker-1", "0".
- `resource_of(api_version, kind) -> Resource`: plural and namespacing, for the generic client calls.
"""

from __future__ import annotations

from dataclasses import dataclass

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "mlops-portal"
LABEL_UID = "portal.io/workload"
LABEL_ROLE = "portal.io/replica-type"


class ManifestError(ValueError):
    """The workload cannot be expressed on this cluster; the message names the field."""


@dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]
