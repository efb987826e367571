"""A notebook on a cluster: started through the kubernetes runtime (a controller's heartbeat and an inventory, no
API server), it becomes a StatefulSet + Service that validate, mounting the work claim where its folders are."""

from __future__ import annotations

import base64
import os
import socket

import pytest
from django.core.exceptions import ValidationError

from apps.accounts.models import hash_token
from apps.notebooks import services, workspace
from apps.notebooks.models import Notebook
from apps.runtime.kubernetes.apply import env_secret
from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.manifests.meta import env_secret_name
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.models import Agent, KubeWorkload
from apps.runtime.workload import Workload
from tests.notebooks.factories import notebook
from tests.runtime.factories import ClusterFactory, bind, node, set_inventory


@pytest.fixture
def on_cluster(world, tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.PORTAL_NOTEBOOK_IMAGE = "quay.io/jupyter/base-notebook:2025-05-05"
    settings.PORTAL_CLUSTER_URL = "http://portal.mlops.svc:8000"  # SITE_URL is this host's loopback
    world.project_a.runtime = "kubernetes"
    world.project_a.save()
    cluster = ClusterFactory(name="lab", work_volume_claim="portal-work")
    set_inventory(cluster, [node("n1", cpu=(8.0, 1.0))])
    bind(cluster, world.project_a, namespace="team-a", is_default=True)
    Agent.objects.create(kind=Agent.Kind.KUBERNETES, hostname=socket.gethostname(), pid=os.getpid(), address="")
    return cluster


def test_a_notebook_becomes_a_statefulset_and_a_service_that_validate(world, on_cluster, settings):
    nb = services.start_notebook(notebook(world.project_a, world.bob, cpu="1", memory_bytes=2 * 2**30))

    assert nb.status == Notebook.Status.STARTING
    assert nb.runtime == "kubernetes"
    row = KubeWorkload.objects.get(uid=nb.handle)
    assert (row.cluster.name, row.namespace) == ("lab", "team-a")
    workload = Workload.from_dict(row.spec)
    objects = build(workload, ClusterProfile.of(on_cluster, row.namespace))
    validate_all(objects, "1.33")
    statefulset, service = objects
    assert [statefulset["kind"], service["kind"]] == ["StatefulSet", "Service"]
    assert nb.upstream == f"http://{service['metadata']['name']}.team-a.svc:8888"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8888, "targetPort": "http"}]

    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    home = str(workspace.home_dir(world.project_a, world.bob))
    assert container["image"] == "quay.io/jupyter/base-notebook:2025-05-05"
    assert container["command"][:3] == ["python", "-m", "jupyterlab"]
    assert {"--ip", "0.0.0.0", "--port", "8888", f"--ServerApp.root_dir={home}"} <= set(container["command"])
    assert container["workingDir"] == home
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["HOME"] == home
    # The tokens are in no manifest and not in the stored workload: the pod reads them from the workload's env
    # Secret, which the controller fills where it applies the workload (issue 27).
    refs = {item["name"]: item.get("valueFrom") for item in container["env"] if "valueFrom" in item}
    secret_name = env_secret_name(workload)
    tokens = ("JUPYTER_TOKEN", "PORTAL_API_TOKEN", "MLFLOW_TRACKING_TOKEN")
    assert refs == {name: {"secretKeyRef": {"name": secret_name, "key": name}} for name in tokens}
    values = {k: base64.b64decode(v).decode() for k, v in env_secret(workload, row.namespace)["data"].items()}
    assert values["JUPYTER_TOKEN"] == nb.token
    assert values["MLFLOW_TRACKING_TOKEN"] == values["PORTAL_API_TOKEN"]
    assert hash_token(values["PORTAL_API_TOKEN"]) == nb.api_token.digest
    assert nb.token not in str(row.spec)
    assert values["PORTAL_API_TOKEN"] not in str(row.spec)
    assert env["PORTAL_API_URL"] == "http://portal.mlops.svc:8000/api/v1/"  # where a pod reaches the portal
    assert env["MLFLOW_TRACKING_URI"] == "http://portal.mlops.svc:8000"
    # The owner's and the shared folder are on the cluster's work claim, mounted where the portal has them.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts[str(settings.PORTAL_WORK_DIR)]]["persistentVolumeClaim"] == {"claimName": "portal-work"}
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}


def test_a_cluster_without_a_work_claim_is_refused(world, on_cluster):
    on_cluster.work_volume_claim = ""
    on_cluster.save()

    with pytest.raises(ValidationError, match="no work volume claim"):
        services.start_notebook(notebook(world.project_a, world.bob))
