"""/api/v1/clusters/ and /api/v1/cluster-bindings/: members read theirs, staff write, kubeconfig write-only."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.runtime.models import Cluster, KubeWorkload, ProjectCluster
from tests.conftest import token_client, user_client
from tests.factories import UserFactory
from tests.runtime.factories import ClusterFactory, bind, kubeconfig_yaml, node, set_inventory

TOKEN = "kube-token-1a2b3c4d5e6f708192a3b4c5d6e7f809"
CLUSTERS = "/api/v1/clusters/"
BINDINGS = "/api/v1/cluster-bindings/"


@pytest.fixture
def staff(db):
    return UserFactory(username="sam", is_staff=True)


@pytest.fixture
def lab(world):
    cluster = ClusterFactory(name="lab", kubeconfig=kubeconfig_yaml(token=TOKEN))
    bind(cluster, world.project_a, namespace="team-a")
    return cluster


def names(response) -> list[str]:
    return [row["name"] for row in response.json()["results"]]


# --- reads -------------------------------------------------------------------------------------------


def test_members_list_the_clusters_of_their_projects_staff_all(world, staff, lab):
    bind(ClusterFactory(name="b-side"), world.project_b)
    ClusterFactory(name="unbound")

    assert names(user_client(world.bob).get(CLUSTERS)) == ["lab"]
    assert names(user_client(world.charlie).get(CLUSTERS)) == ["b-side"]
    assert names(user_client(staff).get(CLUSTERS)) == ["b-side", "lab", "unbound"]


def test_a_cluster_reads_with_its_summary_and_without_its_kubeconfig(world, lab):
    set_inventory(lab, [node("g", gpu=(4, 1)), node("c", ready=False)], error="timeout")
    response = user_client(world.bob).get(f"{CLUSTERS}lab/")

    assert response.status_code == 200
    body = response.json()
    assert "kubeconfig" not in body
    assert body["has_kubeconfig"] is True
    assert body["summary"]["nodes"] == 2
    assert body["summary"]["nodes_ready"] == 1
    assert body["summary"]["gpus"] == 4
    assert body["summary"]["gpus_free"] == 3
    assert body["summary"]["error"] == "timeout"
    assert [n["name"] for n in body["inventory"]["nodes"]] == ["g", "c"]


def test_the_inventory_read_leaves_out_which_task_runs_hold_each_node(world, staff, lab):
    """Holders name every project's task runs (the queue's node-level reservations read them); the capacity endpoint
    says who holds what to whom may see it."""
    holders = {"17": {"cpu": 2.0, "memory_bytes": 2**30, "gpu": 1.0}}
    set_inventory(lab, [{**node("g", gpu=(4, 1)), "holders": holders}, node("c")])

    for user in (world.bob, staff):
        body = user_client(user).get(f"{CLUSTERS}lab/").json()
        assert [sorted(n) for n in body["inventory"]["nodes"]] == [sorted(node("g")), sorted(node("c"))]
        assert body["summary"]["gpus_free"] == 3
    lab.refresh_from_db()
    assert lab.inventory["nodes"][0]["holders"] == holders  # the stored inventory keeps them


def test_an_outsider_gets_404_for_every_method_on_a_cluster(world, lab):
    client = user_client(world.charlie)
    assert client.get(f"{CLUSTERS}lab/").status_code == 404
    assert client.patch(f"{CLUSTERS}lab/", {"description": "x"}, format="json").status_code == 404
    assert client.delete(f"{CLUSTERS}lab/").status_code == 404
    binding = ProjectCluster.objects.get(cluster=lab)
    assert client.get(f"{BINDINGS}{binding.pk}/").status_code == 404


def test_members_cannot_write(world, lab):
    client = user_client(world.alice)  # the project's owner, still not a platform admin
    assert client.patch(f"{CLUSTERS}lab/", {"description": "x"}, format="json").status_code == 403
    assert client.delete(f"{CLUSTERS}lab/").status_code == 403
    response = client.post(CLUSTERS, {"name": "mine", "kubeconfig": kubeconfig_yaml()}, format="json")
    assert response.status_code == 403
    response = client.post(BINDINGS, {"project": "project-a", "cluster": "lab"}, format="json")
    assert response.status_code == 403
    assert Cluster.objects.count() == 1
    assert Cluster.objects.get().description == ""


def test_a_project_token_of_a_staff_member_reads_that_project_only_and_cannot_write(world, lab):
    world.charlie.is_staff = True
    world.charlie.save()
    bind(ClusterFactory(name="b-side"), world.project_b)
    client = token_client(world.charlie, project=world.project_b)

    assert names(client.get(CLUSTERS)) == ["b-side"]
    assert client.get(f"{CLUSTERS}lab/").status_code == 404
    assert client.patch(f"{CLUSTERS}b-side/", {"description": "x"}, format="json").status_code == 403
    assert names(token_client(world.charlie).get(CLUSTERS)) == ["b-side", "lab"]


# --- staff writes ------------------------------------------------------------------------------------


def test_staff_create_a_cluster_and_the_response_has_no_kubeconfig(staff):
    text = kubeconfig_yaml(token=TOKEN)
    response = user_client(staff).post(
        CLUSTERS,
        {"name": "gpu", "kubeconfig": text, "operators": ["kserve"], "version": "1.37", "placement": "pack"},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert TOKEN not in response.content.decode()
    assert "kubeconfig" not in response.json()
    assert (response.json()["placement"], response.json()["pack_scheduler_name"]) == ("pack", "portal-binpack")
    cluster = Cluster.objects.get(name="gpu")
    assert (cluster.kubeconfig, cluster.operators, cluster.version) == (text, ["kserve"], "1.37")


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"kubeconfig": "a: [b"}, "kubeconfig", "Not valid YAML"),
        ({"kubeconfig": kubeconfig_yaml(current=None)}, "context", "no current-context"),
        ({"kubeconfig": kubeconfig_yaml(), "context": "x"}, "context", "No context “x”"),
        ({"kubeconfig": kubeconfig_yaml(tokenFile="/t")}, "kubeconfig", "points at a file"),
        ({}, "kubeconfig", "Paste a kubeconfig"),
        ({"in_cluster": True, "kubeconfig": kubeconfig_yaml()}, "kubeconfig", "leave the kubeconfig empty"),
        ({"kubeconfig": kubeconfig_yaml(), "name": "Not A Slug"}, "name", "slug"),
        ({"kubeconfig": kubeconfig_yaml(), "vgpu_resources": {"memory": 4}}, "vgpu_resources", "JSON object"),
        ({"kubeconfig": kubeconfig_yaml(), "operators": ["slurm"]}, "operators", "not a valid choice"),
    ],
)
def test_a_bad_cluster_is_400_with_the_fields_message_and_nothing_saved(staff, body, field, message):
    response = user_client(staff).post(CLUSTERS, {"name": "bad", **body}, format="json")

    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert message in json.dumps(errors[field], ensure_ascii=False)
    assert not Cluster.objects.exists()


def test_a_duplicate_name_is_400_with_the_services_message(staff, lab):
    response = user_client(staff).post(CLUSTERS, {"name": "lab", "kubeconfig": kubeconfig_yaml()}, format="json")
    assert response.status_code == 400
    assert "already exists" in response.json()["name"][0]


def test_a_patch_without_kubeconfig_keeps_it_and_the_name_cannot_change(staff, lab):
    response = user_client(staff).patch(
        f"{CLUSTERS}lab/", {"description": "GPU lab", "name": "other", "kubeconfig": ""}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "lab"
    assert TOKEN not in response.content.decode()
    lab.refresh_from_db()
    assert (lab.name, lab.description) == ("lab", "GPU lab")
    assert TOKEN in lab.kubeconfig


def test_a_patch_with_a_new_kubeconfig_replaces_it_and_a_bad_one_changes_nothing(staff, lab):
    client = user_client(staff)
    bad = client.patch(f"{CLUSTERS}lab/", {"kubeconfig": "nope", "description": "x"}, format="json")
    assert bad.status_code == 400
    lab.refresh_from_db()
    assert (lab.description, TOKEN in lab.kubeconfig) == ("", True)

    good = client.patch(f"{CLUSTERS}lab/", {"kubeconfig": kubeconfig_yaml(token="kube-token-new")}, format="json")
    assert good.status_code == 200
    lab.refresh_from_db()
    assert "kube-token-new" in lab.kubeconfig
    assert TOKEN not in lab.kubeconfig


def test_staff_delete_a_cluster_unless_workloads_ran_on_it(staff, lab):
    KubeWorkload.objects.create(uid="w", cluster=lab, namespace="team-a", spec={})
    response = user_client(staff).delete(f"{CLUSTERS}lab/")
    assert response.status_code == 400
    assert "disable it instead" in response.json()["non_field_errors"][0]

    KubeWorkload.objects.all().delete()
    assert user_client(staff).delete(f"{CLUSTERS}lab/").status_code == 204
    assert not Cluster.objects.exists()


# --- bindings ----------------------------------------------------------------------------------------


def test_members_read_their_projects_bindings_only(world, lab):
    bind(lab, world.project_b, namespace="tenant-b")
    rows = user_client(world.bob).get(BINDINGS).json()["results"]
    assert rows == [
        {
            "id": rows[0]["id"], "project": "project-a", "cluster": "lab", "namespace": "team-a",
            "effective_namespace": "team-a", "is_default": True,
        }
    ]  # fmt: skip
    assert [r["project"] for r in user_client(world.charlie).get(BINDINGS).json()["results"]] == ["project-b"]
    filtered = user_client(world.bob).get(BINDINGS, {"cluster": "nothing"}).json()["results"]
    assert filtered == []


def test_staff_bind_change_and_unbind(world, staff, lab):
    client = user_client(staff)
    created = client.post(BINDINGS, {"project": "project-b", "cluster": "lab", "namespace": "b"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["effective_namespace"], body["is_default"]) == ("b", True)  # project B's first binding

    changed = client.patch(f"{BINDINGS}{body['id']}/", {"namespace": "", "project": "project-a"}, format="json")
    assert changed.status_code == 200
    assert changed.json()["project"] == "project-b"  # project and cluster are fixed once bound
    assert changed.json()["effective_namespace"] == "default"

    assert client.delete(f"{BINDINGS}{body['id']}/").status_code == 204
    assert not ProjectCluster.objects.filter(project=world.project_b).exists()


def test_a_bad_binding_is_400_naming_the_field(world, staff, lab):
    client = user_client(staff)
    response = client.post(BINDINGS, {"project": "project-b", "cluster": "lab", "namespace": "B_ns"}, format="json")
    assert response.status_code == 400
    assert "DNS label" in response.json()["namespace"][0]
    response = client.post(BINDINGS, {"project": "nope", "cluster": "lab"}, format="json")
    assert response.status_code == 400
    assert "project" in response.json()
    assert not ProjectCluster.objects.filter(project=world.project_b).exists()


def test_binding_an_existing_pair_again_updates_it(world, staff, lab):
    response = user_client(staff).post(
        BINDINGS, {"project": "project-a", "cluster": "lab", "namespace": "moved"}, format="json"
    )
    assert response.status_code == 201
    assert ProjectCluster.objects.get(project=world.project_a).namespace == "moved"


def test_no_api_response_carries_the_kubeconfig(world, staff, lab):
    set_inventory(lab, [node("n")])
    for user in (staff, world.bob):
        client = user_client(user)
        for url in (CLUSTERS, f"{CLUSTERS}lab/", BINDINGS, "/api/v1/schema/"):
            content = client.get(url).content.decode()
            assert TOKEN not in content, (user, url)
            assert "certificate-authority-data" not in content, (user, url)


def test_the_lists_cost_the_same_queries_for_one_row_as_for_ten(world, staff):
    client = APIClient()
    client.force_login(staff)  # a session serves the API and the page alike

    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    bind(ClusterFactory(name="c-0"), world.project_a)
    one = {url: queries(url) for url in (CLUSTERS, BINDINGS, "/clusters/")}
    for n in range(1, 10):
        set_inventory(bind(ClusterFactory(name=f"c-{n}"), world.project_b).cluster, [node("n")])
    assert {url: queries(url) for url in one} == one
