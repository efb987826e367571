"""The inventory of a cluster from node and pod dicts, and the capacity the queue reads from it."""

from __future__ import annotations

from apps.runtime.kubernetes.capacity import capacity_by_group, capacity_of, inventory_of, pod_requests
from apps.runtime.kubernetes.inventory import refresh
from apps.runtime.kubernetes.manifests import build, resource_of
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.runtime import live_controllers
from apps.runtime.models import Cluster
from apps.runtime.tasks import kube_refresh_inventory
from apps.runtime.workload import Capacity, NodeRoom, Resources
from tests.runtime.kubernetes.conftest import fresh_runtime, wait_for
from tests.runtime.kubernetes.samples import sample_distributed

GI = 2**30


def node(name, *, cpu="8", memory="32Gi", gpu=None, labels=None, ready=True, unschedulable=False, taints=None):
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpu is not None:
        allocatable["nvidia.com/gpu"] = gpu
    spec = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(node_name, *containers, phase="Running", init=(), overhead=None, labels=None):
    return {
        "metadata": {"name": f"p-{node_name}", **({"labels": labels} if labels else {})},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
            "initContainers": [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)],
            **({"overhead": overhead} if overhead else {}),
        },
        "status": {"phase": phase},
    }


def test_requests_follow_the_schedulers_rules():
    spec = pod(
        "n",
        {"requests": {"cpu": "500m", "memory": "1Gi"}},
        {"limits": {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "1"}},  # only limits: they are the requests
        init=[{"requests": {"cpu": "2", "memory": "256Mi"}}],  # the largest init container counts if larger
        overhead={"cpu": "100m"},
    )
    requests = pod_requests(spec)
    assert float(requests["cpu"]) == 2.1
    assert int(requests["memory_bytes"]) == GI + 512 * 2**20
    assert int(requests["gpu"]) == 1


def test_the_inventory_sums_the_non_terminal_pods_of_each_node():
    nodes = [
        node("gpu-1", gpu="4", labels={"portal.io/resource-group": "training", "gpu-type": "A100", "pool": "ml"}),
        node("cpu-1", cpu="16", memory="64Gi", labels={"pool": "ml"}),
    ]
    pods = [
        pod("gpu-1", {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}}),
        pod("gpu-1", {"requests": {"cpu": "1500m"}}),
        pod("gpu-1", {"requests": {"cpu": "4", "nvidia.com/gpu": "2"}}, phase="Succeeded"),  # done: holds nothing
        pod("cpu-1", {"requests": {"cpu": "3", "memory": "1000Mi"}}, phase="Pending"),
        {"metadata": {"name": "unscheduled"}, "spec": {"containers": []}, "status": {"phase": "Pending"}},
    ]
    inventory = inventory_of(
        nodes,
        pods,
        group_label="portal.io/resource-group",
        gpu_type_label="gpu-type",
        node_selector={"pool": "ml"},
    )
    assert inventory == {
        "nodes": [
            {
                "name": "cpu-1",
                "group": "",
                "gpu_type": "",
                "ready": True,
                "schedulable": True,
                "selected": True,
                "allocatable": {"cpu": 16.0, "memory_bytes": 64 * GI, "gpu": 0.0},
                "requested": {"cpu": 3.0, "memory_bytes": 1000 * 2**20, "gpu": 0.0},
                "pods": 1,
            },
            {
                "name": "gpu-1",
                "group": "training",
                "gpu_type": "A100",
                "ready": True,
                "schedulable": True,
                "selected": True,
                "allocatable": {"cpu": 8.0, "memory_bytes": 32 * GI, "gpu": 4.0},
                "requested": {"cpu": 3.5, "memory_bytes": 4 * GI, "gpu": 1.0},
                "pods": 2,
            },
        ],
        "error": "",
    }


def test_capacity_counts_only_ready_schedulable_selected_nodes():
    nodes = [
        node("a", cpu="8", memory="32Gi", gpu="4", labels={"pool": "ml", "gpu-type": "A100"}),
        node("b", cpu="8", memory="32Gi", labels={"pool": "ml"}, ready=False),
        node("c", cpu="8", memory="32Gi", labels={"pool": "ml"}, unschedulable=True),
        node("d", cpu="8", memory="32Gi", labels={"pool": "web"}),
        node("e", cpu="4", memory="8Gi", labels={"pool": "ml"}, taints=[{"key": "node.kubernetes.io/unschedulable"}]),
        node("f", cpu="2", memory="4Gi", labels={"pool": "ml"}),
    ]
    pods = [
        pod("a", {"requests": {"cpu": "6", "memory": "8Gi", "nvidia.com/gpu": "3"}}),
        pod("f", {"requests": {"cpu": "3", "memory": "1Gi"}}),  # over-committed: offers no CPU, not negative
    ]
    inventory = inventory_of(nodes, pods, gpu_type_label="gpu-type", node_selector={"pool": "ml"})
    assert capacity_of(inventory) == Capacity(
        cpu=2.0, memory_bytes=27 * GI, gpu=1.0, total_cpu=10.0, total_memory_bytes=36 * GI, total_gpu=4.0
    )
    by_group = capacity_by_group(inventory)
    assert set(by_group) == {("", "A100"), ("", "")}
    assert by_group[("", "A100")].gpu == 1.0
    assert by_group[("", "")].cpu == 0.0


def test_no_inventory_means_no_capacity():
    assert capacity_of({}) is None
    assert capacity_of({"nodes": [], "error": ""}) == Capacity(0, 0, 0, 0, 0, 0)


def test_refresh_reads_the_cluster_and_keeps_the_last_nodes_when_it_fails(fake, cluster):
    fake.add_node("gpu-1", cpu="16", memory="64Gi", gpu=2, labels={"gpu-type": "H100"})
    fake.add_node("cordoned", unschedulable=True)
    inventory = refresh(cluster)
    cluster.refresh_from_db()
    assert cluster.inventory == inventory
    assert cluster.inventory_at is not None
    assert [(n["name"], n["gpu_type"], n["schedulable"]) for n in inventory["nodes"]] == [
        ("cordoned", "", False),
        ("gpu-1", "H100", True),
    ]
    assert inventory["nodes"][1]["allocatable"] == {"cpu": 16.0, "memory_bytes": 64 * GI, "gpu": 2.0}
    good_at = cluster.inventory_at

    fake.faults.fail("GET", r"^/api/v1/nodes$", 403, times=1, message='nodes is forbidden: User "portal" cannot list')
    failed = refresh(cluster)
    cluster.refresh_from_db()
    assert "nodes is forbidden" in failed["error"]
    assert failed["nodes"] == inventory["nodes"]
    assert cluster.inventory_at == good_at


def test_the_runtime_capacity_needs_a_live_controller_and_a_good_inventory(fake, cluster, run_controller):
    fake.add_node("gpu-1", cpu="16", memory="64Gi", gpu=2)
    runtime = fresh_runtime()
    assert runtime.capacity() is None  # no controller
    assert not runtime.ready()
    run_controller()
    wait_for(lambda: live_controllers().exists())
    assert runtime.capacity() is None  # no inventory read yet
    assert kube_refresh_inventory(cluster.pk) == "refreshed"  # the task beat queues for each enabled cluster
    assert runtime.ready()
    assert runtime.capacity() == Capacity(16.0, 64 * GI, 2.0, 16.0, 64 * GI, 2.0)
    assert runtime.capacity(cluster="fake") == runtime.capacity()
    assert runtime.capacity(cluster="elsewhere") is None
    cluster.refresh_from_db()
    Cluster.objects.filter(pk=cluster.pk).update(inventory={**cluster.inventory, "error": "unreachable"})
    assert runtime.capacity() is None


def task(run_id, **labels):
    """The labels of a pod of the portal's task run `run_id` (as workload_labels gives them)."""
    return {"app.kubernetes.io/managed-by": "mlops-portal", "portal.io/task-run": str(run_id), **labels}


def test_the_inventory_records_what_each_of_the_portals_tasks_holds_on_each_node():
    nodes = [node("n1", gpu="4"), node("n2", gpu="4"), node("n3")]
    gpu_pod = {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}}
    pods = [
        pod("n1", gpu_pod, labels=task(17, **{"portal.io/replica-type": "master"})),  # a distributed task: 3 pods
        pod("n2", gpu_pod, labels=task(17, **{"portal.io/replica-type": "worker"})),
        pod("n2", gpu_pod, labels=task(17, **{"portal.io/replica-type": "worker"})),
        pod("n1", {"requests": {"cpu": "500m", "memory": "1Gi"}}, phase="Pending", labels=task(5)),
        pod("n1", gpu_pod, phase="Succeeded", labels=task(5)),  # done: holds nothing
        pod("n1", gpu_pod, phase="Failed", labels=task(9)),
        pod("n2", {"requests": {"cpu": "1"}}, labels={"portal.io/task-run": "8"}),  # not the portal's
        pod("n2", {"requests": {"cpu": "1"}}, labels=task("abc")),  # not a task run's id
        pod("n2", {"requests": {"cpu": "1"}}, labels={"app.kubernetes.io/managed-by": "mlops-portal"}),  # a notebook
        pod("n3", {"requests": {"cpu": "1"}}),
    ]
    inventory = inventory_of(nodes, pods)
    by_name = {n["name"]: n for n in inventory["nodes"]}

    assert by_name["n1"]["holders"] == {
        "5": {"cpu": 0.5, "memory_bytes": GI, "gpu": 0.0},
        "17": {"cpu": 2.0, "memory_bytes": 4 * GI, "gpu": 1.0},
    }
    assert list(by_name["n1"]["holders"]) == ["5", "17"]  # by id, not as text
    assert by_name["n2"]["holders"] == {"17": {"cpu": 4.0, "memory_bytes": 8 * GI, "gpu": 2.0}}
    assert "holders" not in by_name["n3"]  # none: no key (the stored inventory stays small)
    assert by_name["n2"]["requested"] == {"cpu": 7.0, "memory_bytes": 8 * GI, "gpu": 2.0}  # every pod still counts
    assert by_name["n2"]["pods"] == 5


def test_capacity_names_each_node_and_lists_its_holders_by_id():
    nodes = [node("n1", gpu="4"), node("n2", gpu="4")]
    pods = [
        pod("n2", {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}}, labels=task(17)),
        pod("n2", {"requests": {"cpu": "1", "memory": "1Gi"}}, labels=task(3)),
        pod("n1", {"requests": {"cpu": "1"}}),
    ]

    capacity = capacity_of(inventory_of(nodes, pods))

    assert capacity.nodes == (
        NodeRoom(Resources.of(7, 32 * GI, 4), Resources.of(8, 32 * GI, 4), name="n1"),
        NodeRoom(
            Resources.of(5, 27 * GI, 3),
            Resources.of(8, 32 * GI, 4),
            name="n2",
            holders=((3, Resources.of(1, GI, 0)), (17, Resources.of(2, 4 * GI, 1))),
        ),
    )
    assert capacity_by_group(inventory_of(nodes, pods))[("", "")].nodes == capacity.nodes


def test_an_inventory_stored_before_holders_still_loads_and_bad_holders_are_left_out():
    old = {
        "name": "n1", "ready": True, "schedulable": True, "selected": True,
        "allocatable": {"cpu": 8.0, "memory_bytes": 32 * GI, "gpu": 0.0},
        "requested": {"cpu": 1.0, "memory_bytes": 0, "gpu": 0.0}, "pods": 1,
    }  # fmt: skip
    odd = {
        **old,
        "name": "n2",
        "holders": {
            "abc": {"cpu": 1.0},
            "-4": {"cpu": 1.0},
            "7": {"cpu": "lots"},
            "8": "two cpus",
            "12": {"cpu": 1.0, "memory_bytes": GI},
        },
    }

    (first, second) = capacity_of({"nodes": [old, odd], "error": ""}).nodes

    assert (first.name, first.holders) == ("n1", ())
    assert (second.name, second.holders) == ("n2", ((12, Resources.of(1, GI, 0)),))
    assert capacity_of({"nodes": [{**old, "holders": ["x"]}]}).nodes[0].holders == ()


def test_refresh_finds_a_distributed_tasks_pods_by_the_labels_its_manifests_give_them(fake, cluster):
    fake.add_node("node-1", cpu="16", memory="64Gi")
    fake.add_node("node-2", cpu="16", memory="64Gi")
    fake.add_node("node-3", cpu="16", memory="64Gi")
    [job] = build(sample_distributed("pytorch", uid="task-17"), ClusterProfile.of(cluster, "team-a"))
    resource = resource_of(job["apiVersion"], job["kind"])
    fake.store.create((resource.group, resource.plural), "team-a", job)
    (name,) = fake.sim.wait_created()
    master, worker = sorted(fake.sim.pod_names(name))
    fake.sim.start_pod("team-a", master, node="node-1")
    fake.sim.start_pod("team-a", worker, node="node-2")

    inventory = refresh(cluster)

    one_pod = {"cpu": 1.0, "memory_bytes": 2 * GI, "gpu": 0.0}  # the sample's resources, per replica
    assert [n.get("holders") for n in inventory["nodes"]] == [{"17": one_pod}, {"17": one_pod}, None]
    rooms = capacity_of(inventory).nodes
    assert [(room.name, room.holders) for room in rooms] == [
        ("node-1", ((17, Resources.of(1, 2 * GI, 0)),)),
        ("node-2", ((17, Resources.of(1, 2 * GI, 0)),)),
        ("node-3", ()),
    ]
