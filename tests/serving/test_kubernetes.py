"""A project on Kubernetes: a revision is one workload of kind "service" — a KServe InferenceService where the cluster
has KServe, else a Deployment + Service + HorizontalPodAutoscaler running our model server — and the manifests of
both modes validate against the cluster's schemas (core kinds strictly, the InferenceService against k8s/crds/).
The model is copied into the work folder every pod mounts; KServe reads it from that claim."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from apps.models import artifacts
from apps.models.registry import create_model_version
from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.models import KubeWorkload, Operator
from apps.runtime.workload import Phase, Workload
from apps.serving.models import InferenceService, Replica
from apps.serving.replicas import kserve_format
from apps.serving.runtime_hooks import ReplicaListener
from apps.serving.services import create_service, deploy, start_service, stop_service
from tests.factories import registered_model, tracking_run
from tests.runtime.factories import ClusterFactory, bind
from tests.serving.factories import artifact_store, iris_bytes, register  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("artifact_store")


@pytest.fixture
def on_cluster(world, settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    project = world.project_a
    project.runtime = "kubernetes"
    project.save()
    return project


def deployed(world, project, cluster, version=None, **fields) -> tuple[InferenceService, Workload, list[dict]]:
    binding = bind(cluster, project, namespace="team-a")
    version = version or register(project, world.alice, iris_bytes())
    values = {"registered_model": version.registered_model, "model_version": version.version, "cpu": "1",
              "memory": "1Gi", "min_replicas": 1, "max_replicas": 3, **fields}  # fmt: skip
    service = create_service(project, world.alice, name="iris", **values)
    revision = deploy(service, world.alice)
    [replica] = revision.replicas.all()
    row = KubeWorkload.objects.get(uid=replica.handle)
    workload = Workload.from_dict(row.spec)
    objects = build(workload, ClusterProfile.of(cluster, binding.effective_namespace))
    return service, workload, objects


def test_with_kserve_a_revision_is_an_inference_service_that_validates(world, on_cluster, settings):
    settings.PORTAL_SERVING_KSERVE_MODE = "Serverless"
    cluster = ClusterFactory(operators=[Operator.KSERVE], work_volume_claim="portal-work")
    service, workload, objects = deployed(world, on_cluster, cluster, scale_target=4)

    assert workload.kind == "service"
    assert workload.service["mode"] == "kserve"
    assert workload.service["deployment_mode"] == "Serverless"
    assert (workload.service["min_replicas"], workload.service["max_replicas"]) == (1, 3)
    assert (workload.service["scale_metric"], workload.service["scale_target"]) == ("concurrency", 4)
    assert workload.service["model_format"] == "sklearn"
    revision = service.revisions.get()
    copied = Path(revision.config["model_path"])
    assert (copied / "model.joblib").read_bytes() == iris_bytes()  # the model, copied into the work folder
    assert (
        workload.service["storage_uri"] == f"pvc://portal-work/{copied.relative_to(Path(revision.config['work_dir']))}"
    )
    assert [o["kind"] for o in objects] == ["InferenceService"]
    predictor = objects[0]["spec"]["predictor"]
    assert predictor["model"]["modelFormat"] == {"name": "sklearn"}
    assert (predictor["minReplicas"], predictor["maxReplicas"], predictor["scaleMetric"]) == (1, 3, "concurrency")
    assert objects[0]["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Serverless"
    validate_all(objects, cluster.version)
    assert revision.config["kserve_mode"] == "Serverless"


def test_kserve_raw_deployment_mode_scales_on_cpu_and_validates(world, on_cluster):
    """RawDeployment (the default) runs the predictor as a Deployment with an HPA, which cannot see concurrency:
    the service's concurrency target gives way to the default CPU utilisation."""
    cluster = ClusterFactory(operators=[Operator.KSERVE], work_volume_claim="portal-work")
    service, workload, objects = deployed(world, on_cluster, cluster, scale_target=4)

    assert service.revisions.get().config["kserve_mode"] == "RawDeployment"
    assert workload.service["deployment_mode"] == "RawDeployment"
    assert (workload.service["scale_metric"], workload.service["scale_target"]) == ("cpu", None)
    [inference_service] = objects
    assert inference_service["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    predictor = inference_service["spec"]["predictor"]
    assert (predictor["scaleMetric"], predictor["minReplicas"]) == ("cpu", 1)
    assert "scaleTarget" not in predictor
    validate_all(objects, cluster.version)


def onnx_version(project, owner):
    """A version whose files are an MLflow Model of the onnx flavour (model/MLmodel beside model/model.onnx)."""
    run = tracking_run(project, owner, name="onnx-int8")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    mlmodel = "flavors:\n  onnx:\n    data: model.onnx\n  python_function:\n    loader_module: mlflow.onnx\n"
    artifacts.save(f"{base}/model/MLmodel", io.BytesIO(mlmodel.encode()))
    artifacts.save(f"{base}/model/model.onnx", io.BytesIO(b"onnx bytes"))
    return create_model_version(registered_model(project, "onnx-iris"), source=f"runs:/{run.run_uuid}/model", run=run)


@pytest.mark.parametrize("kserve_mode", ["RawDeployment", "Serverless"])
def test_kserve_serves_a_version_by_its_own_format_not_the_services_framework(world, on_cluster, settings, kserve_mode):
    """A scikit-learn service rolled to an ONNX version (the optimisation templates register one): KServe must pick its
    ONNX runtime, so the predictor's modelFormat is the version's flavour, not the framework the service began with."""
    settings.PORTAL_SERVING_KSERVE_MODE = kserve_mode
    cluster = ClusterFactory(operators=[Operator.KSERVE], work_volume_claim="portal-work")
    version = onnx_version(on_cluster, world.alice)

    service, workload, objects = deployed(world, on_cluster, cluster, version=version, framework="sklearn")

    assert service.framework == "sklearn"
    assert service.revisions.get().config["model_format"] == "onnx"
    assert workload.service["model_format"] == "onnx"
    [inference_service] = objects
    assert inference_service["spec"]["predictor"]["model"]["modelFormat"] == {"name": "onnx"}
    validate_all(objects, cluster.version)


def test_without_kserve_an_onnx_version_runs_in_the_training_image(world, on_cluster, settings):
    """onnxruntime is in the train environment only: on a cluster its model server runs the train image."""
    settings.PORTAL_IMAGE, settings.PORTAL_TRAIN_IMAGE = "portal:1", "portal:1-train"
    cluster = ClusterFactory(operators=[], work_volume_claim="portal-work")
    version = onnx_version(on_cluster, world.alice)

    _service, workload, objects = deployed(world, on_cluster, cluster, version=version, framework="sklearn")

    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == workload.image == "portal:1-train"
    assert (container["command"] + container.get("args", []))[:3] == ["python", "-m", "apps.serving.modelserver"]
    validate_all(objects, cluster.version)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"framework": "sklearn", "model_format": "onnx"}, "onnx"),
        ({"framework": "sklearn", "model_format": "pytorch"}, "pytorch"),
        ({"framework": "onnx", "model_format": ""}, "onnx"),
        ({"framework": "xgboost"}, "xgboost"),
        ({"framework": "mlflow", "model_format": ""}, "mlflow"),
        ({"framework": "custom"}, "mlflow"),
        ({"framework": "sklearn", "model_format": "unknown-flavour"}, "sklearn"),
    ],
)
def test_the_kserve_format_is_the_versions_then_the_frameworks(config, expected):
    assert kserve_format(config) == expected


def test_without_kserve_a_revision_is_a_deployment_with_service_and_autoscaler_that_validate(
    world, on_cluster, settings
):
    cluster = ClusterFactory(operators=[], work_volume_claim="portal-work")
    service, workload, objects = deployed(world, on_cluster, cluster, scale_metric="cpu", scale_target=70)

    assert workload.service["mode"] == "deployment"
    assert [o["kind"] for o in objects] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"] + container.get("args", [])
    assert command[:3] == ["python", "-m", "apps.serving.modelserver"]
    assert command[command.index("--port") + 1] == "8080"
    assert container["image"] == settings.PORTAL_IMAGE  # scikit-learn: the portal's own image
    assert command[command.index("--model") + 1] == service.revisions.get().config["model_path"]
    hpa = objects[2]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 3)
    assert hpa["metrics"][0]["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    validate_all(objects, cluster.version)

    # The controller reports the Deployment available: the revision's one replica row is ready, the service serves.
    [replica] = service.revisions.get().replicas.all()
    assert replica.upstream == f"http://{objects[1]['metadata']['name']}.team-a.svc:8080"
    ReplicaListener().changed(workload, Phase.RUNNING)
    service.refresh_from_db()
    assert Replica.objects.get(pk=replica.pk).status == Replica.Status.READY
    assert service.status == InferenceService.Status.READY

    # Stopped and started again: a new workload (the old one's objects are being deleted under its own name).
    stop_service(service)
    assert (
        KubeWorkload.objects.get(uid=replica.handle).cancel_requested
        or KubeWorkload.objects.get(uid=replica.handle).state == "cancelled"
    )
    start_service(service, world.alice)
    restarted = Replica.objects.filter(revision__service=service, status=Replica.Status.STARTING).get()
    assert restarted.handle != replica.handle
    assert KubeWorkload.objects.filter(uid=restarted.handle).exists()


def test_concurrency_scaling_without_kserve_falls_back_to_the_cpu_default(world, on_cluster):
    cluster = ClusterFactory(operators=[], work_volume_claim="portal-work")
    _service, workload, objects = deployed(world, on_cluster, cluster)  # scale_metric concurrency (the default)
    assert (workload.service["scale_metric"], workload.service["scale_target"]) == ("cpu", None)
    assert objects[2]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80
    validate_all(objects, cluster.version)
