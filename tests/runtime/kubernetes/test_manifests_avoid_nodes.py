"""`Workload.avoid_nodes` (nodes the queue keeps for a task that holds a reservation there: docs/scheduling.md,
"Node-level reservations") as a required node affinity on every pod of every kind, merged with the workload's own:
the NotIn expression joins every node selector term, since terms are ORed. Without avoided nodes the manifests are
the golden ones, byte for byte."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from apps.runtime.kubernetes.manifests import ManifestError, build
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.workload import Workload
from tests.runtime.kubernetes.samples import (
    SAMPLES,
    dicts_with,
    sample_distributed,
    sample_gpu_job,
    sample_job,
    sample_profile,
    sample_service,
)

GOLDEN = Path(__file__).parent / "golden"
AVOID = {"key": "metadata.name", "operator": "NotIn", "values": ["node-a", "node-b"]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
# Two required terms (either zone, or one named node) and what must stay as it is beside them.
OWN_AFFINITY = {
    "nodeAffinity": {
        REQUIRED: {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["big-1"]}]},
            ]
        },
        PREFERRED: [{"weight": 10, "preference": {"matchExpressions": [{"key": "fast-disk", "operator": "Exists"}]}}],
    },
    "podAntiAffinity": {
        PREFERRED: [
            {
                "weight": 50,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"portal.io/run": "7"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    },
}


def avoiding(workload: Workload, *names: str) -> Workload:
    return dataclasses.replace(workload, avoid_nodes=list(names))


def placements(obj: object) -> list[dict]:
    """Every place in the objects that places pods: each pod spec (of every kind: a template's, a Spark driver's or
    executor's, a KServe predictor's) carries the sample cluster's node selector beside its affinity."""
    return dicts_with(obj, "nodeSelector")


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_every_pod_of_every_kind_keeps_off_the_avoided_nodes(case: str) -> None:
    objs = build(avoiding(SAMPLES[case](), "node-b", "node-a", "node-b"), sample_profile())
    validate_all(objs, "1.33")

    specs = placements(objs)
    assert specs, case
    for spec in specs:
        terms = spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
        assert all(term["matchFields"][-1] == AVOID for term in terms), case
    assert "&id" not in yaml.safe_dump_all(objs)  # no object shared between pods (YAML would alias it)


@pytest.mark.parametrize(
    "workload",
    [sample_job(), sample_distributed("pytorch"), sample_distributed("volcano"), sample_service()],
    ids=["job", "pytorchjob", "volcano-job", "deployment"],
)
def test_the_requirement_joins_every_required_term_and_the_rest_stays(workload: Workload) -> None:
    own = copy.deepcopy(OWN_AFFINITY)
    workload = avoiding(dataclasses.replace(workload, affinity=own), "node-a", "node-b")

    objs = build(workload, sample_profile())

    for version in ("1.29", "1.33", "1.37"):
        validate_all(objs, version)
    for spec in placements(objs[0]):
        affinity = spec["affinity"]
        assert affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
            {
                "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}],
                "matchFields": [AVOID],
            },
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["big-1"]}, AVOID]},
        ]
        assert affinity["nodeAffinity"][PREFERRED] == OWN_AFFINITY["nodeAffinity"][PREFERRED]
        assert affinity["podAntiAffinity"] == OWN_AFFINITY["podAntiAffinity"]
    assert workload.affinity == own == OWN_AFFINITY  # the workload's dict is not changed


@pytest.mark.parametrize(
    "workload",
    [sample_job(), sample_distributed("pytorch"), sample_distributed("volcano"), sample_service()],
    ids=["job", "pytorchjob", "volcano-job", "deployment"],
)
def test_without_a_required_term_the_requirement_is_the_one_term(workload: Workload) -> None:
    objs = build(avoiding(workload, "node-a", "node-b"), sample_profile())

    validate_all(objs, "1.33")
    specs = placements(objs[0])
    assert specs
    for spec in specs:
        assert spec["affinity"] == {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [AVOID]}]}}}


def test_a_preferred_affinity_is_kept_beside_the_new_required_term() -> None:
    job = sample_gpu_job()
    spec = build(avoiding(job, "node-a", "node-b"), sample_profile())[0]["spec"]["template"]["spec"]

    assert spec["affinity"] == {
        "nodeAffinity": {
            **job.affinity["nodeAffinity"],
            REQUIRED: {"nodeSelectorTerms": [{"matchFields": [AVOID]}]},
        }
    }


def test_a_spark_applications_driver_and_executors_keep_off_them_too() -> None:
    workload = sample_distributed("pytorch", command=["{python}", "-m", "apps.jobs.builtin_tasks.spark_features"])
    workload = dataclasses.replace(workload, framework="spark", replicas={"driver": 1, "executor": 2})

    [app] = build(avoiding(workload, "node-a", "node-b"), sample_profile())

    validate_all([app], "1.33")
    for role in ("driver", "executor"):
        terms = app["spec"][role]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [AVOID]}], role


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_without_avoided_nodes_the_manifests_are_the_golden_ones_byte_for_byte(case: str) -> None:
    objs = build(avoiding(SAMPLES[case]()), sample_profile())

    assert yaml.safe_dump_all(objs, sort_keys=False, width=120) == (GOLDEN / f"{case}.yaml").read_text()


def test_a_node_affinity_that_is_not_one_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"affinity\.nodeAffinity"):
        build(avoiding(sample_job(affinity={"nodeAffinity": {REQUIRED: ["x"]}}), "node-a"), sample_profile())
