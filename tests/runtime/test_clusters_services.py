"""The cluster registry's services: kubeconfig checks, saving, visibility, bindings, the inventory summary."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.accounts.services import create_token
from apps.runtime import services
from apps.runtime.models import Cluster, KubeWorkload, ProjectCluster
from tests.factories import UserFactory
from tests.runtime.factories import ClusterFactory, bind, kubeconfig_yaml, node, set_inventory

pytestmark = pytest.mark.django_db


def field_errors(exc: pytest.ExceptionInfo) -> dict[str, list[str]]:
    return exc.value.message_dict


# --- kubeconfig ----------------------------------------------------------------------------------------


def test_it_accepts_a_kubeconfig_and_returns_the_context_used():
    assert services.check_kubeconfig(kubeconfig_yaml()) == "lab-admin"
    text = kubeconfig_yaml(contexts=("a", "b"), current="a")
    assert services.check_kubeconfig(text, "b") == "b"
    assert services.kubeconfig_contexts(text) == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("clusters: [\n  - name: x\n  bad", "Not valid YAML (line"),
        ("- just\n- a list\n", "YAML mapping"),
        ("apiVersion: v1\nkind: Config\n", "YAML mapping"),
        ("contexts: []\n", "defines no contexts"),
        ("contexts: [nope]\n", "each with a name"),
        ("[" * 50_000, "Not valid YAML (line 1)"),  # nested past the limit: not a RecursionError (a 500)
    ],
)
def test_it_names_what_is_wrong_with_a_malformed_kubeconfig(text, fragment):
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(text)
    assert list(field_errors(exc)) == ["kubeconfig"]
    assert fragment in field_errors(exc)["kubeconfig"][0]


def test_an_unknown_context_is_an_error_on_the_context_field_listing_the_known_ones():
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(kubeconfig_yaml(contexts=("a", "b"), current="a"), "prod")
    assert field_errors(exc) == {"context": ["No context “prod” in the kubeconfig (it has: a, b)."]}


def test_without_a_current_context_one_must_be_named():
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(kubeconfig_yaml(contexts=("a", "b"), current=None))
    assert "no current-context; name one of: a, b" in field_errors(exc)["context"][0]


def test_a_current_context_that_does_not_exist_is_a_kubeconfig_error():
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(kubeconfig_yaml(current="gone"))
    assert "No context “gone”" in field_errors(exc)["kubeconfig"][0]


def test_the_context_must_lead_to_a_server_and_a_user():
    no_server = kubeconfig_yaml(server="")
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(no_server)
    assert "has no server address" in field_errors(exc)["kubeconfig"][0]

    missing_user = kubeconfig_yaml().replace("- name: admin\n  user:", "- name: someone-else\n  user:")
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(missing_user)
    assert "uses user “admin”, which the kubeconfig does not define" in field_errors(exc)["kubeconfig"][0]


@pytest.mark.parametrize(
    ("user", "key"),
    [
        ({"client-certificate": "/home/me/.minikube/client.crt"}, "client-certificate"),
        ({"tokenFile": "/t"}, "tokenFile"),
    ],
)
def test_it_refuses_references_to_files_of_this_machine(user, key):
    with pytest.raises(ValidationError) as exc:
        services.check_kubeconfig(kubeconfig_yaml(**user))
    assert f"“{key}” points at a file" in field_errors(exc)["kubeconfig"][0]


# --- save_cluster --------------------------------------------------------------------------------------


def test_save_cluster_creates_and_a_later_save_without_kubeconfig_keeps_it():
    text = kubeconfig_yaml()
    cluster = services.save_cluster(name="gpu-a", kubeconfig=text, operators=["kuberay"], version="1.29")
    assert Cluster.objects.get(name="gpu-a").kubeconfig == text

    services.save_cluster(cluster, description="renamed", kubeconfig="")
    stored = Cluster.objects.get(name="gpu-a")
    assert (stored.description, stored.kubeconfig, stored.operators) == ("renamed", text, ["kuberay"])


def test_save_cluster_collects_every_field_error_and_saves_nothing():
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(
            name="Bad Name",
            kubeconfig="not: [valid",
            version="1.12",
            operators=["slurm"],
            node_selector={"a": 1},
            default_namespace="Not_A_Label",
        )
    errors = field_errors(exc)
    assert set(errors) == {"name", "kubeconfig", "version", "operators", "node_selector", "default_namespace"}
    assert "1.12 cannot be validated against; use one of 1.25 … 1.37" in errors["version"][0]
    assert "Unknown operator slurm" in errors["operators"][0]
    assert not Cluster.objects.exists()


def test_a_cluster_that_packs_names_a_valid_scheduler():
    cluster = services.save_cluster(name="packed", kubeconfig=kubeconfig_yaml(), placement="pack")
    assert (cluster.placement, cluster.scheduler_name) == ("pack", "portal-binpack")
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(cluster, placement="best-fit", pack_scheduler_name="Bin Pack")
    errors = field_errors(exc)
    assert set(errors) == {"placement", "pack_scheduler_name"}
    assert "A scheduler name is lower-case letters" in errors["pack_scheduler_name"][0]


def test_operators_must_be_a_list():
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(name="ops", kubeconfig=kubeconfig_yaml(), operators="kserve")
    assert "Give a list of operators" in field_errors(exc)["operators"][0]


def test_a_cluster_needs_a_kubeconfig_unless_it_is_in_cluster():
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(name="empty")
    assert field_errors(exc) == {"kubeconfig": ["Paste a kubeconfig, or connect in-cluster."]}


def test_in_cluster_excludes_a_kubeconfig_and_switching_to_it_drops_the_stored_one():
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(name="inside", in_cluster=True, kubeconfig=kubeconfig_yaml())
    assert "leave the kubeconfig empty" in field_errors(exc)["kubeconfig"][0]

    cluster = ClusterFactory(name="moving")
    services.save_cluster(cluster, in_cluster=True)
    assert Cluster.objects.get(name="moving").kubeconfig == ""


def test_a_changed_context_is_checked_against_the_stored_kubeconfig():
    cluster = ClusterFactory(kubeconfig=kubeconfig_yaml(contexts=("a", "b"), current="a"))
    services.save_cluster(cluster, context="b")
    assert Cluster.objects.get(pk=cluster.pk).context == "b"
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(Cluster.objects.get(pk=cluster.pk), context="c")
    assert "No context “c”" in field_errors(exc)["context"][0]
    assert Cluster.objects.get(pk=cluster.pk).context == "b"


def test_a_duplicate_name_is_a_field_error():
    ClusterFactory(name="taken")
    with pytest.raises(ValidationError) as exc:
        services.save_cluster(name="taken", kubeconfig=kubeconfig_yaml())
    assert "already exists" in field_errors(exc)["name"][0]


def test_a_cluster_with_workload_records_cannot_be_deleted():
    cluster = ClusterFactory()
    KubeWorkload.objects.create(uid="w1", cluster=cluster, namespace="default", spec={})
    with pytest.raises(ValidationError, match="1 workloads ran on cluster"):
        services.delete_cluster(cluster)
    assert Cluster.objects.filter(pk=cluster.pk).exists()


# --- visibility ----------------------------------------------------------------------------------------


def test_members_see_the_clusters_of_their_projects_staff_see_all(world):
    a, b, lonely = ClusterFactory(name="a"), ClusterFactory(name="b"), ClusterFactory(name="lonely")
    bind(a, world.project_a)
    bind(b, world.project_b)
    staff = UserFactory(username="sam", is_staff=True)

    assert set(services.visible_clusters(world.bob)) == {a}
    assert set(services.visible_clusters(world.charlie)) == {b}
    assert set(services.visible_clusters(staff)) == {a, b, lonely}
    assert set(services.visible_bindings(world.charlie).values_list("project__slug", flat=True)) == {"project-b"}


def test_a_project_token_limits_visibility_even_for_staff(world):
    a, b = ClusterFactory(name="a"), ClusterFactory(name="b")
    bind(a, world.project_a)
    bind(b, world.project_b)
    world.charlie.is_staff = True
    world.charlie.save()
    token, _raw = create_token(world.charlie, name="ci", project=world.project_b)

    assert services.is_platform_admin(world.charlie) is True
    assert services.is_platform_admin(world.charlie, token) is False
    assert set(services.visible_clusters(world.charlie, token)) == {b}


# --- bindings ------------------------------------------------------------------------------------------


def test_a_projects_first_binding_is_its_default_and_one_default_remains(world):
    a, b = ClusterFactory(name="a"), ClusterFactory(name="b")
    first = bind(a, world.project_a, namespace="team-a")
    assert first.is_default is True
    second = bind(b, world.project_a)
    assert second.is_default is False

    bind(b, world.project_a, is_default=True)
    defaults = ProjectCluster.objects.filter(project=world.project_a, is_default=True)
    assert list(defaults.values_list("cluster__name", flat=True)) == ["b"]

    services.unbind_project(ProjectCluster.objects.get(project=world.project_a, cluster=b))
    remaining = ProjectCluster.objects.get(project=world.project_a)
    assert (remaining.cluster, remaining.is_default, remaining.effective_namespace) == (a, True, "team-a")


def test_binding_again_changes_the_namespace_instead_of_duplicating(world):
    cluster = ClusterFactory(default_namespace="shared")
    bind(cluster, world.project_a)
    assert ProjectCluster.objects.get().effective_namespace == "shared"
    bind(cluster, world.project_a, namespace="ns-a")
    assert ProjectCluster.objects.get().effective_namespace == "ns-a"


def test_a_namespace_must_be_a_dns_label(world):
    with pytest.raises(ValidationError) as exc:
        bind(ClusterFactory(), world.project_a, namespace="Team_A")
    assert "DNS label" in field_errors(exc)["namespace"][0]
    assert not ProjectCluster.objects.exists()


# --- inventory -----------------------------------------------------------------------------------------


def test_the_summary_totals_per_group_and_gpu_type_and_counts_free_only_on_usable_nodes():
    cluster = set_inventory(
        ClusterFactory(),
        [
            node("gpu-1", group="train", gpu_type="A100", gpu=(4, 1), cpu=(32, 10)),
            node("gpu-2", group="train", gpu_type="A100", gpu=(4, 0), schedulable=False),
            node("gpu-3", group="infer", gpu_type="T4", gpu=(2, 3), ready=False),
            node("cpu-1", group="infer", cpu=(8, 2)),
            node("gpu-4", group="train", gpu_type="A100", gpu=(8, 0), selected=False),
        ],
    )
    summary = services.summarize_inventory(cluster)

    assert [n.name for n in summary.nodes] == ["cpu-1", "gpu-3", "gpu-1", "gpu-2", "gpu-4"]
    assert (summary.total.nodes, summary.total.ready) == (5, 4)
    assert (summary.total.gpu.allocatable, summary.total.gpu.requested, summary.total.gpu.free) == (18, 4, 3)
    groups = {t.key: t for t in summary.groups}
    assert (groups["train"].cpu.allocatable, groups["train"].cpu.free) == (48, 22)
    assert (groups["infer"].gpu.free, groups["infer"].nodes) == (0, 2)
    types = {t.key: t for t in summary.gpu_types}
    assert set(types) == {"A100", "T4"}
    assert (types["A100"].gpu.allocatable, types["A100"].gpu.free) == (16, 3)
    assert summary.nodes[1].gpu.percent == 100  # over-committed (3 of 2) shows as a full bar
    assert summary.nodes[2].gpu.percent == 25


def test_the_summary_of_a_cluster_never_read_or_with_junk_is_empty_not_an_error():
    assert services.summarize_inventory(ClusterFactory()).never_refreshed is True
    cluster = set_inventory(ClusterFactory(), ["junk", {"name": "n", "allocatable": {"cpu": "x"}}], error="boom")
    summary = services.summarize_inventory(cluster)
    assert (summary.error, len(summary.nodes), summary.total.cpu.allocatable) == ("boom", 1, 0.0)
