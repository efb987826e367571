"""Priority classes (apps/runtime/priority.py): a task's pods, its Volcano job and its Kubeflow job's PodGroup name
the PriorityClass of its run's priority — the order the portal's queue used — on a cluster that has the classes,
and the classes k8s/priorityclasses/ ships are exactly the code's, valid and in the queue's order."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from apps.runtime import priority
from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.validation import validate_all
from tests.runtime.kubernetes.samples import dicts_with, sample_distributed, sample_job, sample_profile

WITH_CLASSES = sample_profile(priority_classes=True)
SHIPPED = Path(settings.BASE_DIR) / "k8s" / "priorityclasses" / "priorityclasses.yaml"


def pod_specs(obj: dict) -> list[dict]:
    return dicts_with(obj, "containers")


@pytest.mark.parametrize(("run_priority", "name"), [(0, "portal-priority-0"), (3, "portal-priority-3")])
def test_a_jobs_pods_name_the_class_of_the_runs_priority(run_priority: int, name: str) -> None:
    objs = build(sample_job(priority=run_priority), WITH_CLASSES)
    validate_all(objs, "1.33")
    assert {spec["priorityClassName"] for spec in pod_specs(objs[0])} == {name}


def test_priorities_beyond_the_classes_share_the_last_one() -> None:
    assert priority.class_name(10**9) == "portal-priority-5"
    assert priority.class_name(-7) == "portal-priority-minus-2"
    assert priority.class_name(-1) == "portal-priority-minus-1"


def test_a_volcano_job_and_its_pods_name_it() -> None:
    [job] = build(sample_distributed("volcano", priority=1), WITH_CLASSES)
    validate_all([job], "1.33")
    assert job["spec"]["priorityClassName"] == "portal-priority-1"
    assert {spec["priorityClassName"] for spec in pod_specs(job["spec"]["tasks"])} == {"portal-priority-1"}


def test_a_kubeflow_jobs_podgroup_names_it_beside_the_gang() -> None:
    objs = build(sample_distributed("pytorch", priority=2), WITH_CLASSES)
    validate_all(objs, "1.33")
    policy = objs[0]["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy == {"minAvailable": 2, "queue": "research", "priorityClass": "portal-priority-2"}
    assert {spec["priorityClassName"] for spec in pod_specs(objs[0]["spec"]["pytorchReplicaSpecs"])} == {
        "portal-priority-2"
    }


@pytest.mark.parametrize(
    "workload",
    [sample_job(priority=2), sample_distributed("volcano", priority=2), sample_distributed("pytorch", priority=2)],
)
def test_a_cluster_without_the_classes_and_a_workload_without_a_priority_name_none(workload) -> None:
    for objs in (build(workload, sample_profile()), build(sample_job(), WITH_CLASSES)):
        assert "priorityClass" not in str(objs)


def shipped() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(SHIPPED.read_text()) if doc]


def test_the_shipped_classes_are_the_codes_and_valid() -> None:
    assert shipped() == priority.priority_classes()
    for obj in shipped():
        kubernetes_validate.validate(obj, "1.33", strict=True)


def test_the_classes_follow_the_queues_order_and_never_preempt() -> None:
    classes = shipped()
    values = {c["metadata"]["name"]: c["value"] for c in classes}
    levels = range(priority.LOWEST, priority.HIGHEST + 1)
    assert [values[priority.class_name(n)] for n in levels] == sorted(values.values())
    assert len(set(values.values())) == len(classes)
    assert {(c["preemptionPolicy"], c["globalDefault"]) for c in classes} == {("Never", False)}
    assert values["portal-priority-0"] == 0  # the same as a pod that names no class
