"""The cluster pages: who sees what, the staff forms (kubeconfig write-only, errors on the form), inventories."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.runtime.models import Cluster, KubeWorkload, ProjectCluster
from tests.factories import UserFactory
from tests.runtime.factories import ClusterFactory, bind, kubeconfig_yaml, node, set_inventory

TOKEN = "kube-token-0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a"


@pytest.fixture
def staff(db):
    return UserFactory(username="sam", is_staff=True)


@pytest.fixture
def lab(world):
    """A cluster bound to project A (alice, bob), with a kubeconfig whose token must never be shown."""
    cluster = ClusterFactory(name="lab", kubeconfig=kubeconfig_yaml(token=TOKEN), operators=["training-operator"])
    bind(cluster, world.project_a, namespace="team-a")
    return cluster


def as_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form_data(**overrides) -> dict:
    data = {
        "name": "new-lab", "description": "", "enabled": "on", "kubeconfig": kubeconfig_yaml(token=TOKEN),
        "context": "", "version": "1.33", "default_namespace": "default", "node_selector": "{}",
        "resource_group_label": "portal.io/resource-group", "gpu_resource": "nvidia.com/gpu",
        "gpu_type_label": "gpu-type", "vgpu_resources": "{}", "rdma_resource": "", "volcano_queue": "default",
        "placement": "spread", "pack_scheduler_name": "portal-binpack", "work_volume_claim": "",
    }  # fmt: skip
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


# --- list and detail ---------------------------------------------------------------------------------


def test_members_list_only_their_projects_clusters_and_staff_all(world, staff, lab):
    ClusterFactory(name="elsewhere")
    bind(Cluster.objects.get(name="elsewhere"), world.project_b)

    bob_page = as_user(world.bob).get(reverse("runtime:cluster-list")).content.decode()
    charlie_page = as_user(world.charlie).get(reverse("runtime:cluster-list")).content.decode()
    staff_page = as_user(staff).get(reverse("runtime:cluster-list")).content.decode()

    assert ">lab<" in bob_page
    assert "elsewhere" not in bob_page
    assert ">elsewhere<" in charlie_page
    assert ">lab<" not in charlie_page
    assert ">lab<" in staff_page
    assert ">elsewhere<" in staff_page
    assert "New cluster" in staff_page
    assert "New cluster" not in bob_page


def test_the_list_shows_version_operators_nodes_gpus_and_inventory_state(world, lab):
    set_inventory(lab, [node("g1", gpu=(4, 1)), node("g2", gpu=(4, 4)), node("down", ready=False, gpu=(8, 0))])
    stale = ClusterFactory(name="stale", version="1.29")
    bind(stale, world.project_a)
    set_inventory(stale, [], error="Unauthorized: the token was revoked", at=None)
    fresh = ClusterFactory(name="fresh")
    bind(fresh, world.project_a)

    html = as_user(world.bob).get(reverse("runtime:cluster-list")).content.decode()

    assert "training-operator" in html
    assert "<td>2 / 3</td>" in html  # nodes ready / total
    assert "<td>3 / 16</td>" in html  # GPUs free (ready nodes only) / total
    assert "Last refresh failed: Unauthorized: the token was revoked" in html
    assert "never refreshed" in html  # "fresh" was never read
    assert "1.29" in html


def test_the_list_filter_is_the_api_filterset(world, staff, lab):
    ClusterFactory(name="other", enabled=False)
    html = as_user(staff).get(reverse("runtime:cluster-list"), {"enabled": "false"}).content.decode()
    assert ">other<" in html
    assert ">lab<" not in html


def test_the_cluster_page_shows_nodes_usage_and_totals(world, lab):
    set_inventory(
        lab,
        [
            node("gpu-node-1", group="train", gpu_type="A100", cpu=(32, 8), gpu=(4, 1), pods=7),
            node("gpu-node-2", group="train", gpu_type="A100", gpu=(4, 0), schedulable=False),
            node("cpu-node-1", group="", cpu=(16, 4)),
            node("edge-1", selected=False),
        ],
    )
    response = as_user(world.bob).get(reverse("runtime:cluster-detail", kwargs={"name": "lab"}))

    assert response.status_code == 200
    html = response.content.decode()
    for text in (
        "gpu-node-1",
        "gpu-node-2",
        "cpu-node-1",
        "cordoned",
        "not selected",
        "A100",
        "(none)",
        "Per GPU type",
    ):
        assert text in html
    assert 'aria-valuenow="25"' in html  # gpu-node-1: 1 of 4 GPUs requested
    assert "8 / 32" in html  # its CPU requested / allocatable
    assert "3 / 8" in html  # the A100 totals: free / allocatable GPUs
    summary = response.context["summary"]
    assert [t.key for t in summary.groups] == ["", "train"]


def test_a_cluster_never_read_says_so(world, lab):
    html = as_user(world.bob).get(reverse("runtime:cluster-detail", kwargs={"name": "lab"})).content.decode()
    assert "never refreshed" in html


def test_members_see_only_their_projects_bindings_and_no_admin_controls(world, staff, lab):
    bind(lab, world.project_b, namespace="secret-tenant-ns")
    html = as_user(world.bob).get(reverse("runtime:cluster-detail", kwargs={"name": "lab"})).content.decode()

    assert "team-a" in html
    assert "Project B" not in html
    assert "secret-tenant-ns" not in html
    assert "Bind a project" not in html
    assert "Unbind" not in html

    staff_html = as_user(staff).get(reverse("runtime:cluster-detail", kwargs={"name": "lab"})).content.decode()
    assert "secret-tenant-ns" in staff_html
    assert "Bind a project" in staff_html


@pytest.mark.parametrize(
    ("name", "kwargs", "method"),
    [
        ("runtime:cluster-detail", {"name": "lab"}, "get"),
        ("runtime:cluster-edit", {"name": "lab"}, "get"),
        ("runtime:cluster-edit", {"name": "lab"}, "post"),
        ("runtime:cluster-delete", {"name": "lab"}, "post"),
        ("runtime:binding-save", {"name": "lab"}, "post"),
    ],
)
def test_an_outsider_gets_404_and_a_member_403_on_writes(world, lab, name, kwargs, method):
    url = reverse(name, kwargs=kwargs)
    assert getattr(as_user(world.charlie), method)(url).status_code == 404
    expected = 200 if name == "runtime:cluster-detail" else 403
    assert getattr(as_user(world.bob), method)(url).status_code == expected


def test_only_staff_may_open_the_create_page(world, staff):
    assert as_user(world.alice).get(reverse("runtime:cluster-create")).status_code == 403
    assert as_user(world.alice).post(reverse("runtime:cluster-create"), form_data()).status_code == 403
    assert not Cluster.objects.exists()
    assert as_user(staff).get(reverse("runtime:cluster-create")).status_code == 200


def test_anonymous_is_sent_to_login(db):
    response = Client().get(reverse("runtime:cluster-list"))
    assert response.status_code == 302
    assert reverse("accounts:login") in response["Location"]


# --- staff forms -------------------------------------------------------------------------------------


def test_staff_create_a_cluster(staff):
    response = as_user(staff).post(
        reverse("runtime:cluster-create"),
        form_data(operators=["kserve", "volcano"], node_selector='{"pool": "ml"}', placement="pack"),
    )
    assert response.status_code == 302
    cluster = Cluster.objects.get(name="new-lab")
    assert response["Location"] == reverse("runtime:cluster-detail", kwargs={"name": "new-lab"})
    assert TOKEN in cluster.kubeconfig
    assert (cluster.operators, cluster.node_selector) == (["kserve", "volcano"], {"pool": "ml"})
    assert cluster.scheduler_name == "portal-binpack"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"kubeconfig": "clusters: [oops"}, "kubeconfig", "Not valid YAML"),
        ({"kubeconfig": kubeconfig_yaml(server="")}, "kubeconfig", "has no server address"),
        ({"context": "prod"}, "context", "No context “prod” in the kubeconfig"),
        ({"kubeconfig": ""}, "kubeconfig", "Paste a kubeconfig, or connect in-cluster."),
        ({"in_cluster": "on"}, "kubeconfig", "leave the kubeconfig empty"),
        ({"version": "1.9"}, "version", "cannot be validated against"),
        ({"node_selector": '["x"]'}, "node_selector", "JSON object of strings"),
    ],
)
def test_a_bad_cluster_is_a_form_error_on_its_field_and_nothing_is_saved(staff, overrides, field, message):
    response = as_user(staff).post(reverse("runtime:cluster-create"), form_data(**overrides))

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors, errors
    assert any(message in e for e in errors[field])
    assert message in response.content.decode().replace("&ldquo;", "“").replace("&rdquo;", "”")
    assert not Cluster.objects.exists()
    assert TOKEN not in response.content.decode()  # what was typed is not echoed back either


def test_the_edit_page_never_shows_the_kubeconfig_and_empty_keeps_it(staff, lab):
    url = reverse("runtime:cluster-edit", kwargs={"name": "lab"})
    page = as_user(staff).get(url)
    html = page.content.decode()
    assert page.status_code == 200
    assert TOKEN not in html
    assert "certificate-authority-data" not in html
    assert "Leave this empty to keep it" in html

    response = as_user(staff).post(url, form_data(name="lab", kubeconfig="", description="GPU lab", version="1.31"))

    assert response.status_code == 302
    lab.refresh_from_db()
    assert (lab.description, lab.version) == ("GPU lab", "1.31")
    assert TOKEN in lab.kubeconfig
    assert lab.name == "lab"


def test_the_name_cannot_change_on_edit(staff, lab):
    response = as_user(staff).post(
        reverse("runtime:cluster-edit", kwargs={"name": "lab"}), form_data(name="renamed", kubeconfig="")
    )
    assert response.status_code == 302
    assert Cluster.objects.filter(name="lab").exists()
    assert not Cluster.objects.filter(name="renamed").exists()


def test_an_invalid_edit_leaves_the_stored_cluster_as_it_was(staff, lab):
    url = reverse("runtime:cluster-edit", kwargs={"name": "lab"})
    response = as_user(staff).post(url, form_data(name="lab", kubeconfig="", context="nope", description="changed"))

    assert response.status_code == 400
    assert "No context" in response.context["form"].errors["context"][0]
    lab.refresh_from_db()
    assert (lab.description, lab.context) == ("", "")
    assert TOKEN in lab.kubeconfig


def test_switching_to_in_cluster_drops_the_kubeconfig(staff, lab):
    url = reverse("runtime:cluster-edit", kwargs={"name": "lab"})
    response = as_user(staff).post(url, form_data(name="lab", kubeconfig="", in_cluster="on"))
    assert response.status_code == 302
    lab.refresh_from_db()
    assert (lab.in_cluster, lab.kubeconfig) == (True, "")


def test_staff_delete_a_cluster_unless_workloads_ran_on_it(staff, lab):
    busy = ClusterFactory(name="busy")
    KubeWorkload.objects.create(uid="w", cluster=busy, namespace="default", spec={})

    response = as_user(staff).post(reverse("runtime:cluster-delete", kwargs={"name": "busy"}), follow=True)
    assert "disable it instead" in response.content.decode()
    assert Cluster.objects.filter(name="busy").exists()

    response = as_user(staff).post(reverse("runtime:cluster-delete", kwargs={"name": "lab"}))
    assert response.status_code == 302
    assert not Cluster.objects.filter(name="lab").exists()
    assert not ProjectCluster.objects.exists()


# --- bindings ----------------------------------------------------------------------------------------


def test_staff_bind_and_unbind_a_project(world, staff, lab):
    url = reverse("runtime:binding-save", kwargs={"name": "lab"})
    response = as_user(staff).post(url, {"project": "project-b", "namespace": "team-b", "is_default": "on"})
    assert response.status_code == 302
    binding = ProjectCluster.objects.get(project=world.project_b, cluster=lab)
    assert (binding.namespace, binding.is_default) == ("team-b", True)

    unbind = reverse("runtime:binding-delete", kwargs={"name": "lab", "pk": binding.pk})
    assert as_user(world.bob).post(unbind).status_code == 403
    assert as_user(staff).post(unbind).status_code == 302
    assert not ProjectCluster.objects.filter(project=world.project_b).exists()


def test_a_bad_namespace_is_a_form_error_and_binds_nothing(world, staff, lab):
    url = reverse("runtime:binding-save", kwargs={"name": "lab"})
    response = as_user(staff).post(url, {"project": "project-b", "namespace": "Team_B"})
    assert response.status_code == 400
    assert "DNS label" in response.context["binding_form"].errors["namespace"][0]
    assert not ProjectCluster.objects.filter(project=world.project_b).exists()


# --- a project's clusters ----------------------------------------------------------------------------


def test_a_project_lists_its_clusters_as_a_section_of_its_overview(world, lab):
    overview = as_user(world.bob).get(reverse("projects:overview", kwargs={"project": "project-a"}))
    section_url = reverse("runtime:project-clusters", kwargs={"project": "project-a"})
    assert f'hx-get="{section_url}"' in overview.content.decode()

    partial = as_user(world.bob).get(section_url, HTTP_HX_REQUEST="true")
    html = partial.content.decode()
    assert partial.status_code == 200
    assert "<html" not in html
    assert ">lab<" in html
    assert "team-a" in html
    assert "default" in html

    page = as_user(world.bob).get(section_url)
    assert "<html" in page.content.decode()
    assert as_user(world.charlie).get(section_url).status_code == 404


def test_the_kubeconfig_appears_on_no_page(world, staff, lab):
    set_inventory(lab, [node("n1")])
    urls = [
        reverse("runtime:cluster-list"),
        reverse("runtime:cluster-detail", kwargs={"name": "lab"}),
        reverse("runtime:cluster-edit", kwargs={"name": "lab"}),
        reverse("runtime:project-clusters", kwargs={"project": "project-a"}),
        f"/admin/runtime/cluster/{lab.pk}/change/",
    ]
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    for user in (staff, root, world.bob):
        for url in urls:
            html = as_user(user).get(url).content.decode()
            assert TOKEN not in html, (user, url)
            assert "certificate-authority-data" not in html, (user, url)
