"""What every manifest shares: our labels, object names, metadata and the table of resources we create or read."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.workload import Workload

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "mlops-portal"
LABEL_UID = "portal.io/workload"
LABEL_ROLE = "portal.io/replica-type"
# A pipeline task's pods carry its task run's id (the inventory counts what each task holds on each node).
LABEL_TASK_RUN = "portal.io/task-run"
ANNOTATION_NAME = "portal.io/name"
ANNOTATION_FRAMEWORK = "portal.io/framework"
# kubectl logs / exec pick this container of a pod when none is named; the log follower reads it too.
ANNOTATION_DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"

# Workload labels the portal sets (apps/jobs/dispatcher.py) → the label/annotation key they become on objects.
# Any other workload label becomes portal.io/<key with "_" as "-">.
_KNOWN_KEYS = {"task_run": LABEL_TASK_RUN, "run": "portal.io/run", "project": "portal.io/project"}

_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Object names we derive stay well under 63 characters: the operators append "-worker-12", "-head-x7k2p", a
# StatefulSet's revision hash ("-" + 10 characters, and the result must stay a 63-character label value), …
NAME_MAX = 40


class ManifestError(ValueError):
    """The workload cannot be expressed on this cluster; the message names the field."""


@dataclass(frozen=True)
class Resource:
    """A kind as the generic client calls address it: /apis/<group>/<version>/[namespaces/<ns>/]<plural>."""

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


_RESOURCES = {
    (r.api_version, r.kind): r
    for r in (
        Resource("batch/v1", "Job", "jobs"),
        Resource("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
        Resource("kubeflow.org/v1", "TFJob", "tfjobs"),
        Resource("kubeflow.org/v1", "MPIJob", "mpijobs"),
        Resource("kubeflow.org/v1", "PaddleJob", "paddlejobs"),
        Resource("kubeflow.org/v1", "XGBoostJob", "xgboostjobs"),
        Resource("batch.volcano.sh/v1alpha1", "Job", "jobs"),
        Resource("ray.io/v1", "RayJob", "rayjobs"),
        Resource("sparkoperator.k8s.io/v1beta2", "SparkApplication", "sparkapplications"),
        Resource("apps/v1", "Deployment", "deployments"),
        Resource("apps/v1", "StatefulSet", "statefulsets"),
        Resource("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        Resource("serving.kserve.io/v1beta1", "InferenceService", "inferenceservices"),
        Resource("v1", "Service", "services"),
        Resource("v1", "Pod", "pods"),
        Resource("v1", "Event", "events"),
        Resource("v1", "Secret", "secrets"),
        Resource("v1", "ConfigMap", "configmaps"),
        Resource("v1", "Node", "nodes", namespaced=False),
    )
}


def resource_of(api_version: str, kind: str) -> Resource:
    """Plural and scope of a kind we create or read, for the generic client calls; LookupError for others."""
    try:
        return _RESOURCES[(api_version, kind)]
    except KeyError:
        raise LookupError(f"not a resource the portal creates or reads: {api_version} {kind}") from None


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def label_value(text: str) -> str:
    """`text` as a valid label value (63 characters of letters, digits, '-', '_', '.'; alphanumeric at both ends).
    Deterministic; a value that had to be cut or changed keeps a hash of the original so that it stays unique."""
    text = str(text)
    if len(text) <= 63 and _LABEL_VALUE_RE.match(text):
        return text
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", text).strip("-_.")
    return f"{cleaned[:54].rstrip('-_.')}-{_digest(text)}".lstrip("-")


def object_name(workload: Workload | str) -> str:
    """The primary object's name, from the uid alone (so that creating it again finds it): a DNS-1035 label
    (lower case, starts with a letter: the Kubeflow operators require it) of at most NAME_MAX characters.
    Takes the workload or its uid."""
    uid = workload.uid if isinstance(workload, Workload) else str(workload)
    name = re.sub(r"[^a-z0-9]+", "-", uid.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"w-{name}".rstrip("-")
    if name == uid and len(name) <= NAME_MAX:
        return name
    # Cut or cleaned up: a hash of the uid keeps "Task_1" and "task-1" (or two long uids) apart.
    return f"{name[: NAME_MAX - 9].rstrip('-')}-{_digest(uid)}"


def _portal_key(key: str) -> str:
    return _KNOWN_KEYS.get(key) or f"portal.io/{re.sub(r'[^a-z0-9]+', '-', key.lower()).strip('-') or 'label'}"


def workload_labels(workload: Workload, role: str | None = None) -> dict[str, str]:
    """Labels of every object (and, with `role`, pod template) of the workload: ours, plus the portal's ids
    (project, run, task run, …) as label values, so that `kubectl get pods -l portal.io/run=42` works."""
    labels = {LABEL_MANAGED: MANAGED_BY, LABEL_UID: label_value(workload.uid)}
    for key, value in workload.labels.items():
        portal_key = _portal_key(key)
        if len(portal_key.partition("/")[2]) <= 63:  # a longer key cannot be a label; the annotation keeps it
            labels[portal_key] = label_value(value)
    if role is not None:
        labels[LABEL_ROLE] = label_value(role)
    return labels


def workload_annotations(workload: Workload) -> dict[str, str]:
    """The same ids unabridged (a label value is cut at 63 characters), and the workload's human name."""
    annotations = {ANNOTATION_NAME: workload.name} if workload.name else {}
    if workload.framework:
        annotations[ANNOTATION_FRAMEWORK] = workload.framework
    annotations.update({_portal_key(key): str(value) for key, value in workload.labels.items()})
    return annotations


def namespace_of(workload: Workload, profile: ClusterProfile) -> str:
    return workload.namespace or profile.namespace


def metadata(workload: Workload, profile: ClusterProfile, name: str | None = None) -> dict[str, Any]:
    """metadata of a top-level object of the workload."""
    return {
        "name": name or object_name(workload),
        "namespace": namespace_of(workload, profile),
        "labels": workload_labels(workload),
        "annotations": workload_annotations(workload),
    }


def selector_labels(workload: Workload, role: str) -> dict[str, str]:
    """What a Service / Deployment / StatefulSet selects its pods by: the workload and the role, nothing that
    changes between applies."""
    return {LABEL_UID: label_value(workload.uid), LABEL_ROLE: label_value(role)}


def env_secret_name(workload: Workload | str) -> str:
    """The Opaque Secret holding the values of the project secrets a workload's env references (created by the
    controller just before the workload's other objects, deleted with them; pods read it by secretKeyRef)."""
    base = object_name(workload)
    return f"{base[: NAME_MAX - 4].rstrip('-')}-env"


def registry_secret_name(image_pk: int | str) -> str:
    """The dockerconfigjson Secret the controller keeps for an Image's registry credentials (the dispatcher
    names it in the workload's image_pull_secrets)."""
    return f"portal-registry-{image_pk}"
