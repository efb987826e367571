"""Dry run of a pipeline with a spark-features node: on a cluster with the Spark operator it is one SparkApplication
that validates against k8s/crds/, reading the pinned dataset version from the shared work folder; a cluster without
the operator refuses it, naming what is missing."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from apps.datasets import demo as datasets_demo
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.services import save_pipeline
from apps.runtime.kubernetes.validation import validate_all
from tests.runtime.factories import ClusterFactory, bind

pytestmark = pytest.mark.django_db

SPEC = {
    "nodes": [
        {
            "name": "features",
            "template": "spark-features",
            "args": {"dataset": "iris@1", "one_hot": "species", "output_dataset": "iris-features"},
        }
    ]
}


@pytest.fixture
def pipeline(world):
    load_builtin_templates()
    datasets_demo.populate(world.project_a, world.alice)
    return save_pipeline(world.project_a, world.alice, name="spark", description="", spec=SPEC)


def manifests(world, operators: list[str]) -> str:
    cluster = ClusterFactory(name="lab", version="1.33", work_volume_claim="portal-work", operators=operators)
    bind(cluster, world.project_a, namespace="team-a", is_default=True)
    out = StringIO()
    call_command("pipeline_manifests", "project-a/spark", stdout=out)
    return out.getvalue()


def test_the_node_is_a_valid_spark_application_reading_the_pinned_version(world, pipeline, settings):
    objects = [doc for doc in yaml.safe_load_all(manifests(world, ["spark-operator"])) if doc]

    validate_all(objects, "1.33")
    [app] = objects
    assert (app["kind"], app["metadata"]["namespace"]) == ("SparkApplication", "team-a")
    spec = app["spec"]
    assert spec["mainApplicationFile"] == "local:///app/apps/jobs/builtin_tasks/spark_features.py"
    assert spec["image"] == settings.PORTAL_TRAIN_IMAGE == "mlops-portal:dev-train"  # the Dockerfile's `train` target
    arguments = spec["arguments"]
    assert arguments[arguments.index("--dataset") + 1].startswith(str(settings.PORTAL_WORK_DIR / "datasets"))
    assert arguments[arguments.index("--output_dataset") + 1] == "iris-features"
    assert spec["executor"]["instances"] == 1  # the template's replicas: {driver: 1, executor: 1}
    assert str(settings.PORTAL_WORK_DIR) in {m["mountPath"] for m in spec["driver"]["volumeMounts"]}
    assert {v["name"] for v in spec["volumes"]} >= {m["name"] for m in spec["executor"]["volumeMounts"]}


def test_a_cluster_without_the_spark_operator_refuses_the_node(world, pipeline):
    with pytest.raises(CommandError, match="cannot run on cluster"):
        manifests(world, ["training-operator"])
