"""Validation before apply: core kinds strictly with kubernetes-validate, custom kinds with k8s/crds/, anything
else refused; messages name the kind, the name and the path."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.manifests.dispatch import _PHASES
from apps.runtime.kubernetes.validation import ManifestInvalid, crd_schemas, schema_version, validate, validate_all
from tests.runtime.kubernetes.samples import (
    sample_distributed,
    sample_job,
    sample_profile,
    sample_service,
)


def built(workload) -> list[dict]:
    return build(workload, sample_profile())


def test_a_misspelt_field_of_a_core_object_is_refused_with_its_path() -> None:
    job = built(sample_job())[0]
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"

    with pytest.raises(ManifestInvalid) as caught:
        validate(job, "1.33")

    error = caught.value
    assert str(error) == (
        "Job task-101: spec.template.spec.containers[0]: Additional properties are not allowed"
        " ('imagePullPolicyy' was unexpected) (Kubernetes 1.33)"
    )
    assert (error.kind, error.name, error.path, error.version) == (
        "Job",
        "task-101",
        "spec.template.spec.containers[0]",
        "1.33",
    )


def test_a_wrong_type_in_a_core_object_is_refused() -> None:
    service = built(sample_service())[1]
    service["spec"]["ports"][0]["port"] = "eighty"

    with pytest.raises(ManifestInvalid, match=r"^Service svc-301: spec\.ports\[0\]\.port: 'eighty' is not of type"):
        validate(service, "1.29")


def test_a_misspelt_field_inside_a_custom_resources_pod_template_is_refused() -> None:
    job = built(sample_distributed("pytorch"))[0]
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resource"] = {}

    with pytest.raises(
        ManifestInvalid,
        match=r"^PyTorchJob task-200: spec\.pytorchReplicaSpecs\.Worker\.template\.spec\.containers\[0\]: "
        r"Additional properties .*'resource'",
    ):
        validate(job, "1.33")


@pytest.mark.parametrize(
    ("framework", "change", "message"),
    [
        (
            "pytorch",
            lambda o: o["spec"]["runPolicy"].update(backofLimit=1),
            r"spec\.runPolicy: Additional properties .*'backofLimit'",
        ),
        (
            "pytorch",
            lambda o: o["spec"]["runPolicy"].update(backoffLimit="3"),
            r"spec\.runPolicy\.backoffLimit: '3' is not of type 'integer'",
        ),
        (
            "pytorch",
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
            r"Master\.replicas: 1 was expected",
        ),
        (
            "pytorch",
            lambda o: o["spec"]["pytorchReplicaSpecs"].update(Chief=o["spec"]["pytorchReplicaSpecs"]["Worker"]),
            r"'Chief' was unexpected",
        ),
        (
            "pytorch",
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
                name="torch"
            ),
            r"Worker\.template\.spec\.containers: The operator requires a container named 'pytorch'",
        ),
        (
            "tf",
            lambda o: o["spec"]["tfReplicaSpecs"]["Chief"].update(restartPolicy="Sometimes"),
            r"Chief\.restartPolicy: 'Sometimes' is not one of",
        ),
        (
            "mpi",
            lambda o: o["spec"]["mpiReplicaSpecs"].pop("Launcher"),
            r"spec\.mpiReplicaSpecs: 'Launcher' is a required property",
        ),
        (
            "xgboost",
            lambda o: o["spec"].update(xgboostReplicaSpecs={}),
            r"spec: Additional properties .*'xgboostReplicaSpecs'",
        ),
        (
            "volcano",
            lambda o: o["spec"]["policies"].append({"event": "PodCrashed", "action": "RestartJob"}),
            r"spec\.policies\[2\]\.event: 'PodCrashed' is not one of",
        ),
        ("volcano", lambda o: o["spec"]["plugins"].update(sv=[]), r"spec\.plugins: 'sv' is not one of"),
        (
            "volcano",
            lambda o: o["spec"]["tasks"][0].update(replicas=-1),
            r"spec\.tasks\[0\]\.replicas: -1 is less than the minimum",
        ),
        (
            "ray",
            lambda o: o["spec"]["rayClusterSpec"]["headGroupSpec"].update(rayStartParam={}),
            r"headGroupSpec: Additional properties .*'rayStartParam'",
        ),
        ("ray", lambda o: o["spec"].update(entrypoint=""), r"spec\.entrypoint: '' should be non-empty"),
        (
            "pytorch",
            lambda o: o["metadata"].update(name="1-job"),
            r"^PyTorchJob 1-job: metadata\.name: '1-job' does not match",
        ),
    ],
)
def test_a_bad_custom_resource_is_refused_with_its_path(framework: str, change, message: str) -> None:
    obj = built(sample_distributed(framework))[0]
    change(obj)

    with pytest.raises(ManifestInvalid, match=message):
        validate(obj, "1.33")


def test_a_bad_inference_service_is_refused() -> None:
    isvc = built(sample_service("kserve"))[0]
    tolerations = copy.deepcopy(isvc)
    isvc["spec"]["predictor"]["scaleMetric"] = "gpu"
    tolerations["spec"]["predictor"]["tolerations"] = [{"key": "k", "operatr": "Exists"}]

    with pytest.raises(
        ManifestInvalid, match=r"^InferenceService svc-302: spec\.predictor\.scaleMetric: 'gpu' is not one of"
    ):
        validate(isvc, "1.33")
    with pytest.raises(ManifestInvalid, match=r"spec\.predictor\.tolerations\[0\]: Additional properties .*'operatr'"):
        validate(tolerations, "1.37")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
            r"^Widget w: \(the object\): unknown kind example.com/v1 Widget",
        ),
        (
            {"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "j"}},
            r"^Job j: \(the object\): unknown kind batch/v2 Job",
        ),
        (
            {"apiVersion": "kubeflow.org/v2", "kind": "PyTorchJob", "metadata": {"name": "p"}},
            r"unknown kind kubeflow.org/v2 PyTorchJob",
        ),
        ({"kind": "Job"}, r"^not a Kubernetes object"),
    ],
)
def test_an_unknown_kind_is_a_failure_never_a_pass(obj: dict, message: str) -> None:
    with pytest.raises(ManifestInvalid, match=message):
        validate(obj, "1.33")


def test_versions_outside_the_schemas_are_refused_and_others_map_to_the_nearest_older() -> None:
    assert schema_version("1.33") == "1.33.0"
    assert schema_version("v1.30.4") == "1.30.0"
    with pytest.raises(ManifestInvalid, match=r"^Kubernetes 1.99: kubernetes-validate .* has schemas for 1.25.0 to"):
        validate(built(sample_job())[0], "1.99")
    with pytest.raises(ManifestInvalid, match=r"^Kubernetes 1.20: "):
        validate(built(sample_job())[0], "1.20")
    with pytest.raises(ManifestInvalid, match=r"^not a Kubernetes version: 'latest'"):
        validate(built(sample_job())[0], "latest")


def test_validate_all_reports_every_bad_object() -> None:
    deployment, service, autoscaler = built(sample_service())
    deployment["spec"]["replica"] = 2
    autoscaler["spec"]["maxReplicas"] = "five"

    with pytest.raises(ManifestInvalid) as caught:
        validate_all([deployment, service, autoscaler], "1.33")

    assert str(caught.value).count("(Kubernetes 1.33)") == 2
    assert "Deployment svc-301: spec: Additional properties are not allowed ('replica' was unexpected)" in str(
        caught.value
    )
    assert "HorizontalPodAutoscaler svc-301: spec.maxReplicas: 'five' is not of type" in str(caught.value)
    assert (caught.value.kind, caught.value.path) == ("Deployment", "spec")
    validate_all([service], "1.33")  # the good one alone passes


def test_there_is_a_schema_for_every_custom_primary_kind_and_none_for_core_kinds() -> None:
    custom = {key for key in _PHASES if "." in key[0].partition("/")[0]}

    assert custom <= set(crd_schemas())
    for api_version, kind in crd_schemas():
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # else the core schema would shadow ours
            kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, "1.33", strict=True)
