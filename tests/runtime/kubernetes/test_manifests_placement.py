"""Bin-packing (Cluster.placement "pack"): every kind's pods name the cluster's packing scheduler profile, except
the pods Volcano schedules (a Volcano job's, a Kubeflow job's whose gang Volcano takes), which keep Volcano; "spread"
leaves the manifests as they were. k8s/scheduler/ ships the profile (kube-scheduler) and Volcano's binpack
configuration."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.models import PACK_SCHEDULER, Cluster, Operator, Placement
from tests.runtime.kubernetes.samples import ALL_OPERATORS, SAMPLES, sample_distributed, sample_profile
from tests.runtime.kubernetes.test_manifests_priority import pod_specs

PACKING = sample_profile(scheduler_name=PACK_SCHEDULER)
NO_VOLCANO = replace(PACKING, operators=ALL_OPERATORS - {Operator.VOLCANO})
SHIPPED = Path(settings.BASE_DIR) / "k8s" / "scheduler"
KUBEFLOW = ("pytorch", "tf", "mpi", "horovod", "deepspeed", "paddle", "xgboost")


def scheduler_names(objs: list[dict]) -> set[str | None]:
    """spec.schedulerName of every pod the objects would make (KServe's predictor is a pod spec without
    `containers`: its model is the container)."""
    names = set()
    for obj in objs:
        if obj["kind"] == "InferenceService":
            names.add(obj["spec"]["predictor"].get("schedulerName"))
        names |= {spec.get("schedulerName") for spec in pod_specs(obj)}
    return names


def pack_cases() -> list[str]:
    return sorted(case for case in SAMPLES if case not in {f"distributed-{f}" for f in (*KUBEFLOW, "volcano")})


@pytest.mark.parametrize("case", pack_cases())
def test_packing_every_kinds_pods_name_the_packing_scheduler(case: str) -> None:
    objs = build(SAMPLES[case](), PACKING)
    validate_all(objs, "1.33")
    assert scheduler_names(objs) == {PACK_SCHEDULER}


@pytest.mark.parametrize("framework", KUBEFLOW)
def test_a_kubeflow_jobs_pods_name_it_where_volcano_does_not_take_the_gang(framework: str) -> None:
    objs = build(sample_distributed(framework), NO_VOLCANO)
    validate_all(objs, "1.33")
    assert scheduler_names(objs) == {PACK_SCHEDULER}
    assert "schedulingPolicy" not in objs[0]["spec"]["runPolicy"]


@pytest.mark.parametrize("framework", KUBEFLOW)
def test_where_volcano_takes_a_kubeflow_gang_its_pods_name_no_scheduler(framework: str) -> None:
    # The training operator gives them "volcano" only when they name none; another name would leave the gang.
    objs = build(sample_distributed(framework), PACKING)
    validate_all(objs, "1.33")
    assert scheduler_names(objs) == {None}
    assert objs[0]["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "research"


def test_a_volcano_job_keeps_volcano() -> None:
    [job] = build(sample_distributed("volcano"), PACKING)
    validate_all([job], "1.33")
    assert job["spec"]["schedulerName"] == "volcano"
    assert scheduler_names([{"kind": "Tasks", "spec": job["spec"]["tasks"]}]) == {None}  # the job's name applies


def test_a_spark_applications_driver_and_executors_name_it() -> None:
    spark = replace(sample_distributed("pytorch"), framework="spark", replicas={"driver": 1, "executor": 2})
    spark = replace(spark, command=["{python}", "-m", "apps.jobs.builtin_tasks.spark_features"])
    [app] = build(spark, PACKING)
    validate_all([app], "1.33")
    assert {app["spec"][role]["schedulerName"] for role in ("driver", "executor")} == {PACK_SCHEDULER}
    assert "schedulerName" not in str(build(spark, sample_profile()))


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_spreading_leaves_the_manifests_as_they_were(case: str) -> None:
    spreading = ClusterProfile.of(Cluster(name="gpu-cluster", placement=Placement.SPREAD))
    assert spreading.scheduler_name == ""
    objs = build(SAMPLES[case](), replace(sample_profile(), scheduler_name=spreading.scheduler_name))
    golden = Path(__file__).parent / "golden" / f"{case}.yaml"
    assert yaml.safe_dump_all(objs, sort_keys=False, width=120) == golden.read_text()


def test_a_cluster_that_packs_names_its_scheduler_in_the_profile() -> None:
    assert ClusterProfile.of(Cluster(name="c", placement=Placement.PACK)).scheduler_name == PACK_SCHEDULER
    custom = Cluster(name="c", placement=Placement.PACK, pack_scheduler_name="gpu-binpack")
    assert ClusterProfile.of(custom).scheduler_name == "gpu-binpack"
    assert ClusterProfile.of(Cluster(name="c", pack_scheduler_name="gpu-binpack")).scheduler_name == ""


def test_the_shipped_kube_scheduler_profile_packs_gpus_under_the_portals_default_name() -> None:
    config = yaml.safe_load((SHIPPED / "kube-scheduler-config.yaml").read_text())
    assert (config["apiVersion"], config["kind"]) == ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")
    profiles = {p["schedulerName"]: p for p in config["profiles"]}
    assert profiles["default-scheduler"] == {"schedulerName": "default-scheduler"}  # Kubernetes' own, unchanged
    assert Cluster._meta.get_field("pack_scheduler_name").default == PACK_SCHEDULER
    [fit] = [c["args"] for c in profiles[PACK_SCHEDULER]["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    assert fit["scoringStrategy"]["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in fit["scoringStrategy"]["resources"]}
    assert weights["nvidia.com/gpu"] > max(weights["cpu"], weights["memory"])
    assert Cluster._meta.get_field("gpu_resource").default == "nvidia.com/gpu"


def test_the_shipped_volcano_configuration_packs_gpus_and_keeps_the_gang() -> None:
    configmap = yaml.safe_load((SHIPPED / "volcano-scheduler.yaml").read_text())
    kubernetes_validate.validate(configmap, "1.33", strict=True)
    conf = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    plugins = {p["name"]: p.get("arguments", {}) for tier in conf["tiers"] for p in tier["plugins"]}
    assert {"gang", "priority", "predicates", "binpack"} <= set(plugins)
    binpack = plugins["binpack"]
    assert "nvidia.com/gpu" in [r.strip() for r in binpack["binpack.resources"].split(",")]
    assert binpack["binpack.resources.nvidia.com/gpu"] > max(binpack["binpack.cpu"], binpack["binpack.memory"])
    assert plugins["nodeorder"]["leastrequested.weight"] == 0  # its spreading would work against binpack
