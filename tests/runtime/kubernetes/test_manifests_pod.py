"""The shared pod template: command, env contract, resources and accelerators, placement, volumes, labels."""

from __future__ import annotations

import re

import pytest

from apps.runtime.kubernetes.manifests import LABEL_MANAGED, LABEL_ROLE, LABEL_UID, MANAGED_BY, ManifestError, build
from apps.runtime.kubernetes.manifests.meta import label_value
from apps.runtime.workload import Resources
from tests.runtime.kubernetes.samples import (
    WORK_DIR,
    sample_distributed,
    sample_gpu_job,
    sample_job,
    sample_profile,
    sample_service,
    sample_vgpu_job,
)


def pod(workload, profile=None) -> dict:
    """The pod template of a plain Job."""
    return build(workload, profile or sample_profile())[0]["spec"]["template"]


def container(workload, profile=None) -> dict:
    return pod(workload, profile)["spec"]["containers"][0]


def env(workload, profile=None) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(workload, profile)["env"]}


def test_python_tokens_become_the_image_python() -> None:
    job = sample_job(command=["{python}", "-m", "a", "{python:train}", "x{python}"])

    assert container(job)["command"] == ["python", "-m", "a", "python", "x{python}"]
    assert container(job)["image"] == "registry.example.com/portal/tasks:1.4"
    assert container(job)["workingDir"] == job.workdir


def test_the_env_is_the_contract_plus_unbuffered_output_and_no_gpus_without_gpus() -> None:
    job = sample_job()

    assert env(job) == {**job.env, "PYTHONUNBUFFERED": "1", "NVIDIA_VISIBLE_DEVICES": "none"}
    assert [item["name"] for item in container(job)["env"]][: len(job.env)] == list(job.env)  # order kept


def test_a_gpu_job_sees_its_gpus_and_the_workload_env_wins() -> None:
    assert "NVIDIA_VISIBLE_DEVICES" not in env(sample_gpu_job())
    assert "NVIDIA_VISIBLE_DEVICES" not in env(sample_vgpu_job())
    assert env(sample_job(env={"PYTHONUNBUFFERED": "0"}))["PYTHONUNBUFFERED"] == "0"


def test_cpu_is_requested_memory_requested_and_limited() -> None:
    job = sample_job(resources=Resources(cpu=0.5, memory_bytes=1536 * 2**20))

    assert container(job)["resources"] == {
        "requests": {"cpu": "500m", "memory": "1536Mi"},
        "limits": {"memory": "1536Mi"},
    }
    assert "resources" not in container(sample_job(resources=Resources(cpu=0)))


def test_gpus_use_the_cluster_resource_name_and_must_be_whole() -> None:
    profile = sample_profile(gpu_resource="amd.com/gpu")

    assert container(sample_gpu_job(), profile)["resources"]["limits"]["amd.com/gpu"] == "2"
    with pytest.raises(ManifestError, match=r"^resources\.gpu: 0.5 is not a whole number"):
        build(sample_job(resources=Resources(gpu=0.5)), sample_profile())


def test_vgpu_shares_use_the_cluster_names() -> None:
    limits = container(sample_vgpu_job())["resources"]["limits"]

    assert limits == {"memory": "8Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"}


def test_a_vgpu_resource_the_cluster_does_not_name_is_refused() -> None:
    job = sample_vgpu_job(resources=Resources(gpu=1, vgpu={"slices": 2}))

    with pytest.raises(
        ManifestError, match=r"^resources\.vgpu\.slices: cluster 'gpu-cluster' has no vGPU .*cores, memory"
    ):
        build(job, sample_profile())
    with pytest.raises(ManifestError, match=r"^resources\.vgpu\.memory: 1.5 is not a whole number"):
        build(sample_vgpu_job(resources=Resources(gpu=1, vgpu={"memory": 1.5})), sample_profile())


def test_rdma_adds_the_device_and_ipc_lock() -> None:
    main = container(sample_gpu_job())

    assert main["resources"]["limits"]["rdma/hca"] == "1"
    assert main["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert "securityContext" not in container(sample_job())


def test_rdma_on_a_cluster_without_it_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"^rdma: cluster 'gpu-cluster' has no RDMA resource"):
        build(sample_gpu_job(), sample_profile(rdma_resource=""))


def test_the_node_selector_joins_the_cluster_the_workload_and_the_gpu_type() -> None:
    spec = pod(sample_gpu_job(), sample_profile(gpu_type_label="nvidia.com/gpu.product"))["spec"]

    assert spec["nodeSelector"] == {
        "portal.io/resource-group": "training",
        "topology.kubernetes.io/zone": "zone-a",
        "nvidia.com/gpu.product": "A100",
    }


@pytest.mark.parametrize(
    ("workload", "profile", "message"),
    [
        (
            sample_gpu_job(),
            sample_profile(gpu_type_label=""),
            r"^resources\.gpu_type: cluster 'gpu-cluster' has no node",
        ),
        (
            sample_job(resources=Resources(gpu_type="A100")),
            sample_profile(),
            r"^resources\.gpu_type: 'A100' is asked for",
        ),
        (
            sample_job(node_selector={"portal.io/resource-group": "inference"}),
            sample_profile(),
            r"^node_selector\.portal\.io/resource-group: cluster 'gpu-cluster' pins it to 'training'",
        ),
        (sample_gpu_job(resources=Resources(gpu=1, gpu_type="A100 80GB")), sample_profile(), r"cannot be a node label"),
    ],
)
def test_a_placement_the_cluster_cannot_express_is_refused(workload, profile, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        build(workload, profile)


def test_tolerations_affinity_and_pull_secrets_are_passed_on() -> None:
    job = sample_gpu_job()
    spec = pod(job)["spec"]

    assert spec["tolerations"] == job.tolerations
    assert spec["affinity"] == job.affinity
    assert spec["imagePullSecrets"] == [{"name": "portal-registry-3"}]


def test_every_volume_kind_becomes_its_source_and_mount() -> None:
    spec = pod(sample_gpu_job())["spec"]
    volumes = {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}

    assert volumes == {
        "pvc-0": {"persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        "host-path-1": {"hostPath": {"path": "/mnt/scratch"}},
        "nfs-2": {"nfs": {"server": "nfs.example.com", "path": "/exports/models"}},
        "config-map-3": {"configMap": {"name": "train-config"}},
        "secret-4": {"secret": {"secretName": "s3-credentials"}},
        "shm-5": {"emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        "empty-dir-6": {"emptyDir": {"sizeLimit": "10Gi"}},
        "portal-work": {"persistentVolumeClaim": {"claimName": "portal-work"}},
    }
    assert mounts["/data"] == {"name": "pvc-0", "mountPath": "/data", "readOnly": True}
    assert mounts["/dev/shm"]["name"] == "shm-5"
    assert mounts[WORK_DIR] == {"name": "portal-work", "mountPath": WORK_DIR}
    assert "readOnly" not in mounts["/scratch"]


def test_without_a_work_claim_nothing_is_mounted() -> None:
    spec = pod(sample_job(), sample_profile(work_claim=""))["spec"]

    assert "volumes" not in spec
    assert "volumeMounts" not in spec["containers"][0]


def test_a_volume_on_the_work_folder_is_refused() -> None:
    job = sample_job(volumes=[{"kind": "pvc", "source": "mine", "mount_path": WORK_DIR}])

    with pytest.raises(ManifestError, match=r"^volumes\[0\]\.mount_path: .* is where cluster 'gpu-cluster' mounts"):
        build(job, sample_profile())


def test_labels_and_annotations_carry_the_portal_ids() -> None:
    job = sample_job()
    meta = pod(job)["metadata"]

    assert meta["labels"] == {
        LABEL_MANAGED: MANAGED_BY,
        LABEL_UID: "task-101",
        "portal.io/task-run": "101",
        "portal.io/run": "7",
        "portal.io/project": "demo",
        "portal.io/node": "train",
        "portal.io/attempt": "1",
        LABEL_ROLE: "job",
    }
    assert meta["annotations"]["portal.io/task-run"] == "101"
    assert meta["annotations"]["portal.io/name"] == job.name
    assert meta["annotations"]["kubectl.kubernetes.io/default-container"] == "main"


def test_a_value_that_cannot_be_a_label_is_cleaned_and_kept_whole_in_the_annotation() -> None:
    node = "Évaluer le modèle / " + "x" * 80
    job = sample_job(labels={"node": node, "project": "demo"})
    meta = pod(job)["metadata"]

    assert re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", meta["labels"]["portal.io/node"])
    assert len(meta["labels"]["portal.io/node"]) <= 63
    assert meta["annotations"]["portal.io/node"] == node
    assert label_value(node) != label_value(node + "y")  # a hash keeps cut values apart


def test_a_workload_without_an_image_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"^image: a workload on Kubernetes needs a container image"):
        build(sample_job(image=""), sample_profile())


@pytest.mark.parametrize(
    ("workload", "policy"),
    [
        (sample_job(), "Never"),
        (sample_service(), "Always"),
        (sample_distributed("pytorch"), "Never"),
        (sample_distributed("pytorch", retries=3), "OnFailure"),
    ],
)
def test_each_kind_has_its_restart_policy(workload, policy: str) -> None:
    primary = build(workload, sample_profile())[0]
    templates = (
        [spec["template"] for spec in primary["spec"]["pytorchReplicaSpecs"].values()]
        if primary["kind"] == "PyTorchJob"
        else [primary["spec"]["template"]]
    )

    assert {t["spec"]["restartPolicy"] for t in templates} == {policy}
    assert all(t["spec"]["enableServiceLinks"] is False for t in templates)
