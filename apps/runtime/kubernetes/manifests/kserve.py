"""kind "service", mode "kserve": a KServe InferenceService (serving.kserve.io/v1beta1).

The predictor names a model format and where the model is (`service.model_format`, `service.storage_uri`);
KServe picks the serving runtime (and so the image and command) by format, so `image` and `command` are not used.
Autoscaling (min/max replicas, scale metric and target, 0 = scale to zero) and the canary share go to the
predictor; the env contract, resources and volumes to the model's container; labels to its pods. The
`serving.kserve.io/deploymentMode` annotation says how KServe runs it (`service.deployment_mode`): RawDeployment
(a Deployment and an HPA) or Serverless (a Knative Service), whatever the cluster's default.
"""

from __future__ import annotations

from typing import Any

from apps.runtime.kubernetes.manifests.job import describe
from apps.runtime.kubernetes.manifests.meta import (
    ANNOTATION_DEFAULT_CONTAINER,
    ManifestError,
    metadata,
    workload_annotations,
    workload_labels,
)
from apps.runtime.kubernetes.manifests.pod import env_of, resources_of, scheduling_of, volumes_of
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload, parse_service

API_VERSION, KIND = "serving.kserve.io/v1beta1", "InferenceService"
OPERATOR = Operator.KSERVE
ROLE = "predictor"
CONTAINER = "kserve-container"  # what KServe names the model's container (beside its queue-proxy, agent, …)
ANNOTATION_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    service = parse_service(workload.service)
    for key in ("model_format", "storage_uri"):
        if not service[key]:
            raise ManifestError(f"service.{key}: an InferenceService needs one")
    model: dict[str, Any] = {
        "modelFormat": {"name": service["model_format"]},
        "storageUri": service["storage_uri"],
        "env": env_of(workload),
    }
    resources = resources_of(workload, profile)
    if resources:
        model["resources"] = resources
    volumes, mounts = volumes_of(workload, profile)
    if mounts:
        model["volumeMounts"] = mounts
    predictor: dict[str, Any] = {
        "minReplicas": service["min_replicas"],
        "maxReplicas": service["max_replicas"],
        "scaleMetric": service["scale_metric"],
    }
    if service["scale_target"] is not None:
        predictor["scaleTarget"] = service["scale_target"]
    if service["canary_traffic_percent"] is not None:
        predictor["canaryTrafficPercent"] = service["canary_traffic_percent"]
    predictor["labels"] = workload_labels(workload, ROLE)
    predictor["annotations"] = {**workload_annotations(workload), ANNOTATION_DEFAULT_CONTAINER: CONTAINER}
    predictor.update(scheduling_of(workload, profile))
    if volumes:
        predictor["volumes"] = volumes
    predictor["model"] = model
    meta = metadata(workload, profile)
    meta["annotations"] = {**meta["annotations"], ANNOTATION_DEPLOYMENT_MODE: service["deployment_mode"]}
    return [{"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": {"predictor": predictor}}]


_FAILED_TRANSITIONS = ("InvalidSpec", "BlockedByFailedLoad")


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """Running while the Ready condition is True; failed when the model cannot be loaded or the spec is invalid
    (status.modelStatus); pending otherwise, with the Ready condition's reason."""
    status = obj.get("status") or {}
    model = status.get("modelStatus") or {}
    states = model.get("states") or {}
    if model.get("transitionStatus") in _FAILED_TRANSITIONS or states.get("targetModelState") == "FailedToLoad":
        failure = model.get("lastFailureInfo") or {}
        return Phase.FAILED, describe(failure) or str(model.get("transitionStatus") or "model failed to load")
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if ready.get("status") == "True":
        return Phase.RUNNING, ""
    return Phase.PENDING, describe(ready) if ready else ""
