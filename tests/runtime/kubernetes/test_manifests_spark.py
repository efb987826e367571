"""framework "spark": the spark-features template as a SparkApplication (spark-operator v1beta2) that validates against
k8s/crds/, the executors asked for, the replicas it refuses, and its phase read from applicationState."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.runtime.kubernetes.manifests import LABEL_ROLE, ManifestError, build, phase_of
from apps.runtime.kubernetes.validation import ManifestInvalid, validate, validate_all
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.samples import sample_distributed, sample_profile

COMMAND = ["{python:train}", "-m", "apps.jobs.builtin_tasks.spark_features", "--dataset", "/data/iris", "--one_hot",
           "species"]  # fmt: skip


def spark(replicas: dict | None = None, **overrides):
    workload = sample_distributed("pytorch", command=COMMAND, **overrides)
    return replace(workload, framework="spark", replicas=replicas or {"driver": 1, "executor": 2})


def test_the_spark_template_is_a_valid_spark_application() -> None:
    objs = build(spark(replicas={"driver": 1, "executor": 3}, retries=2), sample_profile())

    validate_all(objs)
    app = objs[0]
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    spec = app["spec"]
    assert spec["type"] == "Python"
    assert spec["mainApplicationFile"] == "local:///app/apps/jobs/builtin_tasks/spark_features.py"
    assert spec["arguments"] == ["--dataset", "/data/iris", "--one_hot", "species"]
    assert spec["executor"]["instances"] == 3
    assert spec["restartPolicy"] == {"type": "OnFailure", "onFailureRetries": 2, "onSubmissionFailureRetries": 2}
    assert spec["driver"]["labels"][LABEL_ROLE] == "driver"
    assert any(e["name"] == "PORTAL_OUTPUT_DIR" for e in spec["driver"]["env"])


def test_a_misspelt_field_fails_against_the_crd_schema() -> None:
    app = build(spark(), sample_profile())[0]
    app["spec"]["executor"]["instance"] = 2

    with pytest.raises(ManifestInvalid, match="instance"):
        validate(app)


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"driver": 2}, r"^replicas\.driver: a Spark application has exactly one driver"),
        ({"worker": 1}, r"^replicas\.worker: a Spark application knows the roles driver, executor"),
        ({"executor": 0}, r"^replicas\.executor: a Spark application needs at least one executor"),
    ],
)
def test_replicas_spark_cannot_run_are_refused(replicas: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        build(spark(replicas=replicas), sample_profile())


def test_a_cluster_without_the_spark_operator_is_refused() -> None:
    with pytest.raises(ManifestError, match="needs the Spark operator"):
        build(spark(), sample_profile(operators=frozenset({"training-operator"})))


@pytest.mark.parametrize(
    ("state", "phase"),
    [("SUBMITTED", Phase.PENDING), ("RUNNING", Phase.RUNNING), ("COMPLETED", Phase.SUCCEEDED),
     ("FAILED", Phase.FAILED)],
)  # fmt: skip
def test_its_phase_is_read_from_the_application_state(state: str, phase: Phase) -> None:
    app = {**build(spark(), sample_profile())[0], "status": {"applicationState": {"state": state}}}

    assert phase_of(app)[0] == phase
