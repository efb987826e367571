"""The runtime's admin: the kubeconfig is write-only, saves go through the services, workloads are read-only."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.runtime.models import Cluster, KubeWorkload, ProjectCluster
from tests.factories import UserFactory
from tests.runtime.factories import ClusterFactory, bind, kubeconfig_yaml

TOKEN = "kube-token-77aa66bb55cc44dd33ee22ff11009988"


@pytest.fixture
def root(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def cluster_form(**overrides) -> dict:
    data = {
        "name": "lab", "description": "", "enabled": "on", "kubeconfig": "", "context": "", "version": "1.33",
        "default_namespace": "default", "node_selector": "{}", "resource_group_label": "portal.io/resource-group",
        "gpu_resource": "nvidia.com/gpu", "gpu_type_label": "gpu-type", "vgpu_resources": "{}", "rdma_resource": "",
        "operators": "[]", "volcano_queue": "default", "placement": "spread", "pack_scheduler_name": "portal-binpack",
        "work_volume_claim": "",
    }  # fmt: skip
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_the_admin_adds_a_cluster_through_the_kubeconfig_check(root):
    response = root.post("/admin/runtime/cluster/add/", cluster_form(kubeconfig=kubeconfig_yaml(token=TOKEN)))
    assert response.status_code == 302, response.content.decode()[:3000]
    assert TOKEN in Cluster.objects.get(name="lab").kubeconfig


def test_a_bad_kubeconfig_is_an_admin_form_error_and_nothing_is_saved(root):
    response = root.post("/admin/runtime/cluster/add/", cluster_form(kubeconfig="contexts: [broken"))
    assert response.status_code == 200
    assert "Not valid YAML" in response.context["adminform"].form.errors["kubeconfig"][0]
    assert not Cluster.objects.exists()


def test_the_admin_change_page_hides_the_kubeconfig_and_saving_keeps_it(root):
    cluster = ClusterFactory(name="lab", kubeconfig=kubeconfig_yaml(token=TOKEN))
    url = f"/admin/runtime/cluster/{cluster.pk}/change/"

    page = root.get(url)
    assert page.status_code == 200
    assert TOKEN not in page.content.decode()

    response = root.post(url, cluster_form(description="edited in admin"))
    assert response.status_code == 302, response.content.decode()[:3000]
    cluster.refresh_from_db()
    assert (cluster.description, TOKEN in cluster.kubeconfig) == ("edited in admin", True)


def test_an_unknown_context_in_the_admin_names_the_field(root):
    cluster = ClusterFactory(name="lab")
    response = root.post(f"/admin/runtime/cluster/{cluster.pk}/change/", cluster_form(context="elsewhere"))
    assert response.status_code == 200
    assert "No context “elsewhere”" in response.context["adminform"].form.errors["context"][0]
    assert Cluster.objects.get(pk=cluster.pk).context == ""


def test_the_binding_admin_keeps_one_default_per_project(root, world):
    first = bind(ClusterFactory(name="a"), world.project_a)
    other = ClusterFactory(name="b")
    response = root.post(
        "/admin/runtime/projectcluster/add/",
        {"project": world.project_a.pk, "cluster": other.pk, "namespace": "ns-b", "is_default": "on"},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    first.refresh_from_db()
    assert first.is_default is False
    assert ProjectCluster.objects.get(cluster=other).is_default is True


def test_workloads_are_read_only_and_their_credentials_redacted(root):
    cluster = ClusterFactory(name="lab")
    workload = KubeWorkload.objects.create(
        uid="run-1-train-0", cluster=cluster, namespace="team-a", state=KubeWorkload.State.RUNNING,
        spec={"image": "python:3.11", "env": {"PORTAL_API_TOKEN": "ptk_live_abcdef123456", "EPOCHS": "3"}},
    )  # fmt: skip

    assert root.get("/admin/runtime/kubeworkload/add/").status_code == 403
    changelist = root.get("/admin/runtime/kubeworkload/?state__exact=running").content.decode()
    assert "run-1-train-0" in changelist
    page = root.get(f"/admin/runtime/kubeworkload/{workload.pk}/change/").content.decode()
    assert "ptk_live_abcdef123456" not in page
    assert "EPOCHS" in page
    assert "python:3.11" in page
    root.post(f"/admin/runtime/kubeworkload/{workload.pk}/delete/", {"post": "yes"})
    assert KubeWorkload.objects.filter(pk=workload.pk).exists()
